//! Single reads and writes of one object: get, create, replace (also `/status`), status
//! writes of parents, delete — each recorded for the overlay and the expectations.

use super::*;

impl Writer {
    /// Reads an object from the API server (not the cache). `None` when it does not exist.
    pub(crate) async fn get(
        &self,
        res: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, WriteError> {
        let what = || format!("get {} {namespace}/{name}", res.kind);
        match self.api(res, namespace).get_opt(name).await {
            Ok(Some(obj)) => to_value(&obj, res)
                .map(Some)
                .map_err(|source| WriteError::Encode {
                    what: what(),
                    source,
                }),
            Ok(None) => Ok(None),
            Err(source) => Err(WriteError::Api {
                what: what(),
                source,
            }),
        }
    }

    /// Creates `object` (a child of `owner_uid`). `Ok(None)` if it already exists and is
    /// ours (a stale cache; deterministic names make this harmless). If the name is taken
    /// by an object we do not control, [`WriteError::NameTaken`]: that object is left
    /// alone and the create is not sent again until [`Writer::observe`] sees it change or
    /// a read after [`TAKEN_RECHECK`](super::taken::TAKEN_RECHECK) finds it gone.
    pub(crate) async fn create(
        &self,
        res: &ApiResource,
        owner_uid: &str,
        object: Value,
    ) -> Result<Option<Value>, WriteError> {
        let key = key_of(res, &object);
        let what = format!("create {}", describe(res, &object));
        let owner = owner_uid.to_string();
        match self.known_taken(&owner, &key, &what) {
            Known::Free => {}
            Known::Taken(taken) => return Err(taken),
            // Read the holder again rather than sending the create: the write would be
            // refused if it is still there.
            Known::Stale => {
                if let Some(taken) = self.check_taken(res, &owner, &key, &object, &what).await? {
                    return Err(taken);
                }
            }
        }
        let body: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|source| WriteError::Encode {
                what: what.clone(),
                source,
            })?;
        tracing::info!(%what, "creating child");
        self.expectations.expect_creates(&owner, [key.clone()]);
        let api = self.api(res, &key.namespace);
        let result = traced_write(
            Verb::Create,
            res,
            &key,
            api.create(&PostParams::default(), &body),
        )
        .await;
        match result {
            Ok(created) => {
                self.record(res, &key, None, &created);
                Ok(Some(
                    to_value(&created, res)
                        .map_err(|source| WriteError::Encode { what, source })?,
                ))
            }
            Err(e) => {
                self.expectations.cancel_create(&owner, &key);
                if is_already_exists(&e) {
                    match self.check_taken(res, &owner, &key, &object, &what).await? {
                        Some(taken) => Err(taken),
                        None => Ok(None),
                    }
                } else {
                    Err(WriteError::Api { what, source: e })
                }
            }
        }
    }

    /// Replaces an object (PUT; the body's resourceVersion makes it conditional). Returns the
    /// written object.
    pub(crate) async fn replace(
        &self,
        res: &ApiResource,
        object: Value,
    ) -> Result<Value, WriteError> {
        self.put(res, object, false).await
    }

    /// Replaces the `/status` subresource of `object` (PUT with its resourceVersion).
    pub(crate) async fn replace_status(
        &self,
        res: &ApiResource,
        object: Value,
    ) -> Result<Value, WriteError> {
        self.put(res, object, true).await
    }

    /// PUT of the main object or of `/status`; the written object feeds the overlay.
    pub(super) async fn put(
        &self,
        res: &ApiResource,
        object: Value,
        status: bool,
    ) -> Result<Value, WriteError> {
        let key = key_of(res, &object);
        let what = if status {
            format!("update status of {}", describe(res, &object))
        } else {
            format!("update {}", describe(res, &object))
        };
        let based_on = object.resource_version().map(str::to_owned);
        let body: DynamicObject =
            serde_json::from_value(object).map_err(|source| WriteError::Encode {
                what: what.clone(),
                source,
            })?;
        let api = self.api(res, &key.namespace);
        let pp = PostParams::default();
        let written = if status {
            let write = api.replace_status(&key.name, &pp, &body);
            traced_write(Verb::UpdateStatus, res, &key, write).await
        } else {
            tracing::info!(%what, "updating");
            traced_write(Verb::Update, res, &key, api.replace(&key.name, &pp, &body)).await
        }
        .map_err(|source| WriteError::Api {
            what: what.clone(),
            source,
        })?;
        self.record(res, &key, based_on.as_deref(), &written);
        to_value(&written, res).map_err(|source| WriteError::Encode { what, source })
    }

    /// Writes `status` into `current`'s `/status` unless it is already equal (semantically).
    /// Returns the written object, or `None` when nothing was sent.
    pub(crate) async fn write_status(
        &self,
        res: &ApiResource,
        current: &Value,
        status: Value,
    ) -> Result<Option<Value>, WriteError> {
        if current
            .get("status")
            .is_some_and(|s| json_equal(s, &status))
        {
            return Ok(None);
        }
        let mut updated = current.clone();
        if let Some(map) = updated.as_object_mut() {
            map.insert("status".into(), status);
        }
        self.replace_status(res, updated).await.map(Some)
    }

    /// Deletes `observed` (uid precondition, background propagation so dependents go too,
    /// as upstream). A child that is already gone is fine.
    pub(crate) async fn delete(
        &self,
        res: &ApiResource,
        owner_uid: &str,
        observed: &Value,
    ) -> Result<(), WriteError> {
        let key = key_of(res, observed);
        let what = format!("delete {}", describe(res, observed));
        let owner = owner_uid.to_string();
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: observed.uid().map(str::to_owned),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        tracing::info!(%what, "deleting child");
        self.expectations.expect_deletes(&owner, [key.clone()]);
        let api = self.api(res, &key.namespace);
        match traced_write(Verb::Delete, res, &key, api.delete(&key.name, &dp)).await {
            Ok(_) => {
                self.overlay
                    .record_delete(key.clone(), observed.resource_version());
                self.applied_lock().remove(&key);
                Ok(())
            }
            Err(e) => {
                self.expectations.cancel_delete(&owner, &key);
                if is_not_found(&e) {
                    Ok(())
                } else {
                    Err(WriteError::Api { what, source: e })
                }
            }
        }
    }
}
