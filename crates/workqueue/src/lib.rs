//! `metacontroller-workqueue`: which key a controller syncs when, and whether this process may
//! sync it at all. Every public item is at the crate root; the modules are private:
//!
//! - `queue`: the per-controller work queue (de-duplicated keys, one worker per key, two
//!   priorities and an expedited lane, backoff, delayed adds) and its runner
//!   ([`WorkQueue::run`]): the two phases of a sync ([`Worker`]) and what its end asks of the
//!   queue ([`Outcome`], [`Requeue`]);
//! - `gate`: the [`SyncGate`] in front of every worker of the process, closed and opened by
//!   leader election and shutdown, partitioned into shards with sharding, and the write
//!   fence of the Lease that ownership rests on ([`LeaseDeadlines`]);
//! - `queue_metrics`: the Prometheus metrics of the queues and of the syncs they run.
//!
//! The crate knows nothing of Kubernetes objects: keys are any `Clone + Eq + Hash` type
//! (the controllers use `namespace/name`), and the binary's coordination layer decides what
//! the gate admits.

mod gate;
mod queue;
mod queue_metrics;

pub use gate::{shard_of, stable_hash, Lapse, LeaseDeadlines, SyncGate};
pub use queue::{
    Backoff, Concurrency, Outcome, Priority, QueueMetrics, Requeue, Retry, WorkQueue, Worker,
};
