//! `embedded-apiserver`: an in-process Kubernetes API server (storage, watch, CRDs,
//! defaulting, garbage collection) for tests and `metacontroller dev`.

pub mod defaults;
pub mod schema;
pub mod ssa;
pub mod strategic_merge;
