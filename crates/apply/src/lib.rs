//! `metacontroller-apply`: the pure merge engine (no I/O). Three-way merge of (observed,
//! last-applied, desired) with conventional and schema-aware list merging, the
//! last-applied annotation, semantic no-op detection and server-side-apply bodies.
