//! Rolling updates: ControllerRevisions, one hook call per parent revision, one child moved
//! per sync (upstream `syncRevisions`; see [`crate::rolling`]).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use metacontroller_api::revision::{ControllerRevision, LABEL_API_GROUP, LABEL_RESOURCE};
use metacontroller_dynamic::{ApiResource, Selector, CONTROLLER_UID_LABEL};
use serde_json::Value;

use super::plan::{add_label_if_absent, value_labels, HookOutcome};
use super::reconciler::{HookCall, Inner, ParentState, Revisions};
use super::SyncError;
use crate::children;
use crate::meta::api_group;
use crate::rolling::{self, Desired, ParentRevision, RevisionParent, Rollout};
use crate::writer::to_value;

impl Inner {
    /// Rolling updates: one hook call per parent revision, one child moved to the latest
    /// revision per sync, ControllerRevisions written before children (upstream
    /// `syncRevisions`).
    pub(super) async fn sync_revisions(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
    ) -> Result<HookOutcome, SyncError> {
        let Some(revs) = &self.revisions else {
            return Err(SyncError::Selector("no ControllerRevision informer".into()));
        };
        let observed_revisions = self.observed_revisions(revs, parent)?;
        let parents = self.revision_parents(parent, &observed_revisions);
        let (mut revisions, answers) = self.call_hook_per_revision(parent, call, parents).await?;
        // The same merge schemas as the child writes use, so "up to date" agrees with them.
        let schemas = self.common.writer.schemas_for(call.types).await;
        let condition = self.roll_out(parent, call, &schemas, &mut revisions);
        let mut status = answers.status.unwrap_or_default();
        rolling::set_condition(&mut status, "Updated", &condition);
        let revisions = rolling::prune(revisions);
        self.manage_revisions(&revs.resource, parent, &observed_revisions, &revisions)
            .await?;
        Ok(HookOutcome {
            status: Some(status),
            desired: rolling::merged_desired(&revisions, parent.namespace.as_deref()),
            resync_after_seconds: answers.resync_after_seconds,
            finalized: answers.finalized,
            refused: answers.refused,
        })
    }

    /// The parent's ControllerRevisions (cache + own writes). They are found by controller
    /// ownership plus the parent-type labels; upstream also requires the parent's selector
    /// to match labels copied from `spec.template.metadata.labels`, which parents without a
    /// template never satisfy.
    fn observed_revisions(
        &self,
        revs: &Revisions,
        parent: &ParentState,
    ) -> Result<Vec<ControllerRevision>, SyncError> {
        // The revisions of this parent's resource: `matchLabels` on its group and plural.
        let labels = LabelSelector {
            match_labels: Some(
                [
                    (LABEL_API_GROUP, &self.parent_resource.group),
                    (LABEL_RESOURCE, &self.parent_resource.name),
                ]
                .into_iter()
                .map(|(key, value)| (key.to_string(), value.clone()))
                .collect(),
            ),
            ..LabelSelector::default()
        };
        let selector = Selector::from_label_selector_or_everything(Some(&labels))
            .map_err(|e| SyncError::Selector(e.to_string()))?;
        let mut observed = Vec::new();
        for obj in revs.informer.controlled_by(&parent.uid) {
            let value = to_value(&obj, &revs.resource)?;
            let Some(value) = self.common.writer.fresh(&revs.resource, value) else {
                continue;
            };
            if !selector.matches(&value_labels(&value)) {
                continue;
            }
            observed.push(serde_json::from_value::<ControllerRevision>(value)?);
        }
        Ok(observed)
    }

    /// The parent as each revision sees it, the latest first (a new revision when no
    /// observed one matches the parent's current fields); the others are the parent with
    /// the revision's patch applied.
    fn revision_parents(
        &self,
        parent: &ParentState,
        observed: &[ControllerRevision],
    ) -> Vec<(Value, ControllerRevision)> {
        let field_paths = self
            .controller
            .spec
            .parent_resource
            .revision_history
            .as_ref()
            .map(|h| h.effective_field_paths())
            .unwrap_or_else(|| vec!["spec".to_string()]);
        let latest_patch = rolling::make_patch(&parent.object, &field_paths);
        let mut latest = None;
        let mut others = Vec::new();
        for rev in observed {
            if crate::writer::json_equal(&rev.parent_patch, &latest_patch) {
                latest = Some(rev.clone());
            } else {
                let mut object = parent.object.clone();
                rolling::apply_patch(&mut object, &rev.parent_patch, &field_paths);
                others.push((object, rev.clone()));
            }
        }
        let latest = latest.unwrap_or_else(|| {
            rolling::new_revision(
                &RevisionParent {
                    plural: &self.parent_resource.name,
                    group: &self.parent_resource.group,
                    api_version: &self.parent_resource.api_version,
                    kind: &self.parent_resource.kind,
                    object: &parent.object,
                    generate_selector: self.mapper.generate_selector,
                },
                latest_patch,
            )
        });
        std::iter::once((parent.object.clone(), latest))
            .chain(others)
            .collect()
    }

    /// One hook call per revision. The latest revision's status counts; the earliest
    /// `resyncAfterSeconds` wins; finalized only when every revision says so.
    async fn call_hook_per_revision(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
        parents: Vec<(Value, ControllerRevision)>,
    ) -> Result<(Vec<ParentRevision>, HookOutcome), SyncError> {
        let mut revisions = Vec::new();
        let mut answers = HookOutcome {
            status: None,
            desired: Desired::new(),
            resync_after_seconds: 0.0,
            finalized: true,
            refused: Vec::new(),
        };
        for (index, (object, revision)) in parents.into_iter().enumerate() {
            let response = self.call_hook(parent, &object, call).await?;
            let order = response
                .children
                .iter()
                .map(|c| {
                    let k = children::child_key(c);
                    (k.0, k.1, k.3)
                })
                .collect();
            let (mut desired, mut refused) = children::validate_desired(
                call.types,
                parent.namespace.as_deref(),
                response.children,
            );
            // Each revision's children as they are written (with the generated selector's
            // label), so "up to date" compares like with like; without this a child
            // recreated on the latest revision never counts as updated and the rollout
            // stalls after its first child.
            if self.mapper.generate_selector {
                for (_, child) in desired.values_mut() {
                    add_label_if_absent(child, CONTROLLER_UID_LABEL, &parent.uid);
                }
            }
            answers.refused.append(&mut refused);
            let r = response.resync_after_seconds;
            let resync = answers.resync_after_seconds;
            if r > 0.0 && (resync == 0.0 || r < resync) {
                answers.resync_after_seconds = r;
            }
            answers.finalized &= response.finalized;
            if index == 0 {
                answers.status = response.status;
            }
            revisions.push(ParentRevision {
                revision,
                desired,
                order,
            });
        }
        Ok((revisions, answers))
    }

    /// Moves children between revisions (one per sync, gated by `statusChecks`) and
    /// returns the `Updated` condition.
    fn roll_out(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
        schemas: &[Option<Arc<metacontroller_apply::Schema>>],
        revisions: &mut [ParentRevision],
    ) -> rolling::UpdatedCondition {
        let (observed, types) = (call.observed, call.types);
        let server_side = self.common.writer.strategy().is_server_side();
        let parent_ref = self.parent_ref(parent);
        let up_to_date = |obs: &Value, want: &Value| -> bool {
            if server_side {
                children::apply_body(want, &parent_ref)
                    .is_ok_and(|body| crate::writer::contains_all(obs, &body))
            } else {
                let key = children::child_key(obs);
                let schema = types
                    .iter()
                    .position(|t| t.api_version == key.0 && t.kind == key.1)
                    .and_then(|i| schemas.get(i)?.as_deref());
                matches!(
                    metacontroller_apply::plan(obs, want, schema),
                    Ok(metacontroller_apply::Plan::Unchanged)
                )
            }
        };
        let rolling_of = |group: &str, kind: &str| {
            self.children
                .iter()
                .find(|c| {
                    c.kind.kind == kind
                        && api_group(&c.kind.api_version) == group
                        && c.kind.method.is_rolling()
                })
                .map(|c| (c.kind.method.clone(), c.status_checks.clone()))
        };
        rolling::sync_rolling_update(
            revisions,
            &Rollout {
                observed,
                rolling: &rolling_of,
                up_to_date: &up_to_date,
                parent_namespace: parent.namespace.as_deref(),
            },
        )
    }

    /// Creates, updates and deletes ControllerRevisions so they match `desired`; all of it
    /// before any child is touched, so the rollout state is persisted first.
    async fn manage_revisions(
        &self,
        res: &ApiResource,
        parent: &ParentState,
        observed: &[ControllerRevision],
        desired: &[ParentRevision],
    ) -> Result<(), SyncError> {
        let name_of = |r: &ControllerRevision| r.metadata.name.clone().unwrap_or_default();
        for old in observed {
            if !desired.iter().any(|d| name_of(&d.revision) == name_of(old)) {
                let value = serde_json::to_value(old)?;
                self.common.writer.delete(res, &parent.uid, &value).await?;
            }
        }
        for d in desired {
            let value = serde_json::to_value(&d.revision)?;
            match observed.iter().find(|o| name_of(o) == name_of(&d.revision)) {
                Some(old) if old == &d.revision => {}
                Some(_) => match self.common.writer.replace(res, value).await {
                    Err(e) if e.is_not_found() => {}
                    r => {
                        r?;
                    }
                },
                None => {
                    self.common.writer.create(res, &parent.uid, value).await?;
                }
            }
        }
        Ok(())
    }
}
