//! Server-side apply of children, with the hash of the last body sent per child so an
//! unchanged body is not sent again.

use super::*;

impl Writer {
    /// Server-side apply of `body` (already an apply body: see
    /// [`metacontroller_apply::ssa::apply_patch_body`]). `observed` is the current object if
    /// any: when it already holds everything `body` sets and the same body was sent before,
    /// nothing is sent (`Ok(None)`). The record of sent bodies lives in memory: after a
    /// restart a body whose fields are all in place is not re-sent, so a field the hook
    /// stopped setting is only dropped with the next change of the body.
    pub(crate) async fn apply(
        &self,
        res: &ApiResource,
        owner_uid: &str,
        observed: Option<&Value>,
        body: Value,
    ) -> Result<Option<Value>, WriteError> {
        let ApplyStrategy::ServerSideApply { field_manager } = &self.strategy else {
            return Err(WriteError::Unsupported(
                "server-side apply requested from a dynamic-apply writer".into(),
            ));
        };
        let key = key_of(res, &body);
        let hash = hash_value(&body);
        if let Some(observed) = observed {
            let known = self.applied_hash(&key);
            if known.is_none_or(|h| h == hash) && contains_all(observed, &body) {
                self.applied_lock().insert(key, hash);
                return Ok(None);
            }
        }
        let what = format!("apply {}", describe(res, &body));
        let owner = owner_uid.to_string();
        if observed.is_none() {
            // A forced apply is an upsert: it would take over an object of the same name
            // that we do not control. Read first and leave such an object alone.
            if let Known::Taken(taken) = self.known_taken(&owner, &key, &what) {
                return Err(taken);
            }
            if let Some(taken) = self.check_taken(res, &owner, &key, &body, &what).await? {
                return Err(taken);
            }
        }
        tracing::info!(%what, "server-side apply");
        if observed.is_none() {
            self.expectations.expect_creates(&owner, [key.clone()]);
        }
        let params = PatchParams::apply(field_manager).force();
        let api = self.api(res, &key.namespace);
        let patch = Patch::Apply(&body);
        let result = traced_write(
            Verb::Apply,
            res,
            &key,
            api.patch(&key.name, &params, &patch),
        )
        .await;
        match result {
            Ok(written) => {
                self.applied_lock().insert(key.clone(), hash);
                self.record(
                    res,
                    &key,
                    observed.and_then(|o| o.resource_version()),
                    &written,
                );
                Ok(Some(
                    to_value(&written, res)
                        .map_err(|source| WriteError::Encode { what, source })?,
                ))
            }
            Err(source) => {
                if observed.is_none() {
                    self.expectations.cancel_create(&owner, &key);
                }
                Err(WriteError::Api { what, source })
            }
        }
    }

    pub(super) fn applied_lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, u64>> {
        self.applied.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn applied_hash(&self, key: &ObjectKey) -> Option<u64> {
        self.applied_lock().get(key).copied()
    }
}

/// True if every field `body` sets is already in `observed` (list-maps merged by key, as the
/// apply engine does, values in the form the server stores them): applying it would change
/// nothing. See [`metacontroller_apply::ssa::is_in_place`].
pub(crate) fn contains_all(observed: &Value, body: &Value) -> bool {
    metacontroller_apply::ssa::is_in_place(observed, body)
}
