//! Why a CompositeController does not start, and why one sync fails.

use std::time::Duration;

use metacontroller_hooks::HookError;

use crate::children;
use crate::reconcile::SyncFailure;
use crate::related::RelatedError;
use crate::writer::WriteError;

/// Why a controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The spec is invalid.
    #[error("invalid CompositeController: {0}")]
    Invalid(String),
    /// A resource named by the spec is not served.
    #[error("{0} is not served by the API server")]
    UnknownResource(String),
    /// The parent resource has no `/status` subresource (upstream refuses such parents).
    #[error("[{controller}] Sync error - ignoring, parent resource {gvk} does not have subresource 'Status' enabled")]
    NoStatusSubresource {
        /// The CompositeController's name.
        controller: String,
        /// `group/version, Kind=kind` of the parent.
        gvk: String,
    },
    /// The parent or a child type is cluster-scoped and the process is limited to
    /// namespaces (`--watch-namespaces`).
    #[error(transparent)]
    OutOfScope(#[from] crate::scope::OutOfScope),
}

/// Why one sync failed (the key is requeued with backoff).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The hook failed. Upstream's wording, also for the finalize hook (upstream calls both
    /// through the same path): `sync hook failed for <Kind> <namespace>/<name>: <error>`.
    #[error("sync hook failed for {parent}: {source}")]
    Hook {
        /// `sync` or `finalize`.
        hook: &'static str,
        /// `<Kind> <namespace>/<name>` of the parent (empty namespace when cluster-scoped).
        parent: String,
        /// The error.
        source: HookError,
    },
    /// The parent is not being finalized and there is no sync hook.
    #[error("sync hook not defined")]
    NoSyncHook,
    /// A child could not be planned.
    #[error("invalid sync hook response: {0}")]
    Children(#[from] children::ChildError),
    /// Some of the hook's children were refused (skipped; the others and the status were
    /// written).
    #[error("invalid sync hook response: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused(Vec<children::ChildError>),
    /// The parent's selector is unusable, or a desired child does not match it.
    #[error("{0}")]
    Selector(String),
    /// An API request failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Several child writes failed (the others were done).
    #[error("can't reconcile children for {parent}: {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Writes {
        /// `<Kind> <namespace>/<name>` of the parent (upstream's wording).
        parent: String,
        /// The failed writes.
        errors: Vec<WriteError>,
    },
    /// An object could not be converted.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    /// The customize hook failed or related objects could not be read.
    #[error(transparent)]
    Related(#[from] RelatedError),
}

impl SyncError {
    /// `Some(delay)` when the sync or customize hook answered 429 Too Many Requests: the
    /// key is retried after `Retry-After` (one second without it), with no Event.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            SyncError::Hook { source, .. } | SyncError::Related(RelatedError::Hook(source)) => {
                crate::handle::hook_retry_after(source)
            }
            _ => None,
        }
    }

    /// True when the failure is a 409 Conflict (stale data).
    pub(crate) fn is_conflict(&self) -> bool {
        match self {
            SyncError::Write(e) => e.is_conflict(),
            SyncError::Writes { errors, .. } => errors.iter().any(WriteError::is_conflict),
            _ => false,
        }
    }

    /// True when the API server could not be reached (see [`WriteError::is_unreachable`]).
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            SyncError::Write(e) => e.is_unreachable(),
            SyncError::Writes { errors, .. } => errors.iter().any(WriteError::is_unreachable),
            _ => false,
        }
    }
}

impl SyncFailure for SyncError {
    fn retry_after(&self) -> Option<Duration> {
        SyncError::retry_after(self)
    }

    fn is_conflict(&self) -> bool {
        SyncError::is_conflict(self)
    }

    fn is_unreachable(&self) -> bool {
        SyncError::is_unreachable(self)
    }
}
