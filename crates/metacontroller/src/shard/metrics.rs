//! The sharding metrics of a replica.

use std::collections::HashSet;

use metacontroller_dynamic::Informers;
use metacontroller_workqueue::{shard_of, SyncGate};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

/// `metacontroller_shards_owned`, `metacontroller_shard_parents_owned` (see
/// [`ParentsOwned`]), `metacontroller_shard_members` and
/// `metacontroller_shard_takeovers_total`.
#[derive(Clone)]
pub(super) struct ShardMetrics {
    pub(super) owned: IntGauge,
    pub(super) members: IntGauge,
    pub(super) takeovers: IntCounterVec,
}

/// `metacontroller_shard_parents_owned`, counted from the caches at each scrape: the cached
/// parents (and decorator targets) whose key is in a shard this replica owns now. Nothing
/// is accumulated, so the count follows creations, deletions and handoffs exactly and
/// cannot drift.
struct ParentsOwned {
    gate: SyncGate,
    informers: Informers,
    gauge: IntGauge,
}

impl Collector for ParentsOwned {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let shards = self.gate.shard_count().unwrap_or(1);
        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
        let parents = if owned.is_empty() {
            0
        } else {
            self.informers
                .count_parents(|key| owned.contains(&shard_of(key, shards)))
        };
        self.gauge.set(i64::try_from(parents).unwrap_or(i64::MAX));
        self.gauge.collect()
    }
}

impl ShardMetrics {
    pub(super) fn register(
        registry: &Registry,
        gate: &SyncGate,
        informers: &Informers,
    ) -> anyhow::Result<ShardMetrics> {
        let owned = IntGauge::new(
            "metacontroller_shards_owned",
            "Shards whose parents this replica syncs now (--sharding).",
        )?;
        let members = IntGauge::new(
            "metacontroller_shard_members",
            "Live replicas this replica sees in its sharding group (--sharding).",
        )?;
        let parents = IntGauge::new(
            "metacontroller_shard_parents_owned",
            "Cached parents (and decorator targets) of the shards this replica owns now (--sharding).",
        )?;
        let takeovers = IntCounterVec::new(
            Opts::new(
                "metacontroller_shard_takeovers_total",
                "Shards this replica took over from a replica that was no longer a member (it died or lost its lease), by whether it had cached them ahead (--sharding).",
            ),
            &["cached_ahead"],
        )?;
        registry.register(Box::new(owned.clone()))?;
        registry.register(Box::new(ParentsOwned {
            gate: gate.clone(),
            informers: informers.clone(),
            gauge: parents,
        }))?;
        registry.register(Box::new(members.clone()))?;
        registry.register(Box::new(takeovers.clone()))?;
        Ok(ShardMetrics {
            owned,
            members,
            takeovers,
        })
    }
}
