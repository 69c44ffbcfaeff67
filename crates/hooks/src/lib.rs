//! `metacontroller-hooks`: the webhook client that calls user hook servers (URL or
//! service targets, timeouts, TLS and caBundle, authorization, etag cache, strict/loose
//! response decoding, metrics).
