//! `metacontroller-dynamic`: discovery cache, shared informers per resource, dynamic API
//! access, label/annotation selectors and the per-controller work queue.
