//! The content digest of a hook's ConfigMap, remembered per object: the code source hands
//! out the same `Arc` until the ConfigMap changes, so a call hashes nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::inprocess::code::sha256;
use crate::sources::CodeObject;

/// Objects remembered; past this the memo starts over.
const REMEMBERED: usize = 256;

/// A remembered object (kept alive by the entry) and its digest.
type Remembered = (Arc<CodeObject>, [u8; 32]);

/// Digests of code objects, by identity (each entry keeps its object alive, so an address
/// is never reused while remembered).
#[derive(Default)]
pub(crate) struct Digests {
    known: Mutex<HashMap<usize, Remembered>>,
}

impl Digests {
    /// The SHA-256 of every key and value of `code`, in key order.
    pub(crate) fn of(&self, code: &Arc<CodeObject>) -> [u8; 32] {
        let address = Arc::as_ptr(code) as usize;
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, digest)) = known.get(&address) {
            return *digest;
        }
        let digest = sha256(&super::frame::encode_files(code));
        if known.len() >= REMEMBERED {
            known.clear();
        }
        known.insert(address, (code.clone(), digest));
        digest
    }
}
