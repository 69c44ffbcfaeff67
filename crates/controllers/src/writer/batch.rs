//! A sync's planned child writes, sent with bounded concurrency; a conflict stops the rest.

use super::*;

impl Writer {
    /// Carries out planned child actions, up to the writer's concurrency at once
    /// (`resource_of(type_index)` names each action's resource). The actions of one sync are
    /// independent (one per child; a rolling update puts at most one move in them), so their
    /// order is free, as in upstream, whose map iteration order is random. A failed write does
    /// not stop the others (one bad child must not block the rest), except a 409 Conflict: the
    /// data is stale, so no further write is started; those already sent are awaited and
    /// their outcomes kept (overlay, expectations), so the requeued sync recomputes from them.
    /// Returns the failures (conflicts last). The caller writes the parent's status only
    /// after this returns, i.e. after every child write of the sync has finished.
    pub(crate) async fn execute_all<'r>(
        &self,
        owner_uid: &str,
        actions: Vec<Action>,
        resource_of: impl Fn(usize) -> &'r ApiResource,
    ) -> Vec<WriteError> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let mut pending = actions.into_iter();
        let mut in_flight = FuturesUnordered::new();
        let mut errors = Vec::new();
        let mut conflicts = Vec::new();
        loop {
            while conflicts.is_empty() && in_flight.len() < self.concurrency {
                let Some(action) = pending.next() else { break };
                let res = resource_of(action.type_index());
                in_flight.push(self.execute(res, owner_uid, action));
            }
            match in_flight.next().await {
                None => break,
                Some(Ok(())) => {}
                Some(Err(e)) if e.is_conflict() => conflicts.push(e),
                Some(Err(e)) => errors.push(e),
            }
        }
        let skipped = pending.len();
        if skipped > 0 {
            tracing::debug!(
                owner = owner_uid,
                skipped,
                "conflict: the remaining child writes of this sync were not sent"
            );
        }
        errors.append(&mut conflicts);
        errors
    }

    /// Carries out one planned child action for the parent with uid `owner_uid`.
    pub(crate) async fn execute(
        &self,
        res: &ApiResource,
        owner_uid: &str,
        action: Action,
    ) -> Result<(), WriteError> {
        use crate::metrics::ChildWrite;
        let write = match action {
            Action::Create { object, .. } => {
                self.create(res, owner_uid, object).await?;
                ChildWrite::Create
            }
            Action::Update { object, .. } => match self.replace(res, object).await {
                Err(e) if e.is_not_found() => return Ok(()),
                r => r.map(|_| ChildWrite::Update)?,
            },
            Action::Apply {
                observed, object, ..
            } => match self
                .apply(res, owner_uid, observed.as_ref(), object)
                .await?
            {
                Some(_) => ChildWrite::Apply,
                None => ChildWrite::ApplySkipped,
            },
            Action::Delete { observed, .. } => {
                self.delete(res, owner_uid, &observed).await?;
                ChildWrite::Delete
            }
        };
        self.writes.record(write);
        Ok(())
    }
}
