//! The parent ↔ worker wire format: one frame is a little-endian `u32` length and that
//! many bytes; inside, fields are fixed-width integers and length-prefixed byte strings.
//! Files are sent only when the worker does not hold their digest yet.

use std::io::{self, Read, Write};

use crate::sources::CodeObject;

/// The largest frame either side accepts (files, a request or a response): 64 MiB.
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// One evaluation asked of a worker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    /// The soft data limit (bytes) the worker sets before evaluating.
    pub memory_bytes: u64,
    /// The digest of `files`: the worker's cache key for the parsed code.
    pub digest: [u8; 32],
    /// The ConfigMap's keys; `None` when the worker is believed to hold `digest`.
    pub files: Option<CodeObject>,
    /// The entry key.
    pub entry: String,
    /// The hook request JSON.
    pub request: Vec<u8>,
}

/// A worker's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Response {
    /// The response JSON, and the `std.trace` lines (bounded by the worker).
    Body { body: Vec<u8>, traces: Vec<String> },
    /// The evaluation's error message, and the `std.trace` lines before it.
    Error {
        message: String,
        traces: Vec<String>,
    },
    /// The worker does not hold the digest (evicted or new): send the files.
    UnknownCode,
}

const BODY: u8 = 0;
const ERROR: u8 = 1;
const UNKNOWN: u8 = 2;

impl Request {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.request.len() + 128);
        out.extend_from_slice(&self.memory_bytes.to_le_bytes());
        out.extend_from_slice(&self.digest);
        match &self.files {
            None => out.push(0),
            Some(files) => {
                out.push(1);
                put_files(&mut out, files);
            }
        }
        put_bytes(&mut out, self.entry.as_bytes());
        put_bytes(&mut out, &self.request);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> io::Result<Request> {
        let mut r = Reader(bytes);
        let memory_bytes = r.u64()?;
        let digest: [u8; 32] = r.take(32)?.try_into().map_err(|_| invalid("digest"))?;
        let files = match r.u8()? {
            0 => None,
            _ => Some(r.files()?),
        };
        Ok(Request {
            memory_bytes,
            digest,
            files,
            entry: r.string()?,
            request: r.bytes()?.to_vec(),
        })
    }
}

impl Response {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let (kind, payload, traces): (u8, &[u8], &[String]) = match self {
            Response::Body { body, traces } => (BODY, body, traces),
            Response::Error { message, traces } => (ERROR, message.as_bytes(), traces),
            Response::UnknownCode => (UNKNOWN, &[], &[]),
        };
        out.push(kind);
        put_bytes(&mut out, payload);
        out.extend_from_slice(&(traces.len() as u32).to_le_bytes());
        for line in traces {
            put_bytes(&mut out, line.as_bytes());
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> io::Result<Response> {
        let mut r = Reader(bytes);
        let kind = r.u8()?;
        let payload = r.bytes()?.to_vec();
        let count = r.u32()? as usize;
        let mut traces = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            traces.push(r.string()?);
        }
        match kind {
            BODY => Ok(Response::Body {
                body: payload,
                traces,
            }),
            ERROR => Ok(Response::Error {
                message: String::from_utf8_lossy(&payload).into_owned(),
                traces,
            }),
            UNKNOWN => Ok(Response::UnknownCode),
            other => Err(invalid(&format!("response kind {other}"))),
        }
    }
}

/// Writes `payload` as one frame.
pub(crate) fn write_frame(out: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let length = u32::try_from(payload.len()).map_err(|_| invalid("frame too large"))?;
    out.write_all(&length.to_le_bytes())?;
    out.write_all(payload)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of input.
pub(crate) fn read_frame(input: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut length = [0u8; 4];
    match input.read_exact(&mut length) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(invalid("frame too large"));
    }
    let mut payload = vec![0u8; length];
    input.read_exact(&mut payload)?;
    Ok(Some(payload))
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// `files` as the frame carries them (also what the code digest is taken of).
pub(crate) fn encode_files(files: &CodeObject) -> Vec<u8> {
    let mut out = Vec::new();
    put_files(&mut out, files);
    out
}

fn put_files(out: &mut Vec<u8>, files: &CodeObject) {
    let count = files.data.len() + files.binary_data.len();
    out.extend_from_slice(&(count as u32).to_le_bytes());
    for (key, text) in &files.data {
        out.push(0);
        put_bytes(out, key.as_bytes());
        put_bytes(out, text.as_bytes());
    }
    for (key, bytes) in &files.binary_data {
        out.push(1);
        put_bytes(out, key.as_bytes());
        put_bytes(out, bytes);
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {what}"))
}

/// Reads fields from a frame's payload.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(invalid("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> io::Result<u32> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self) -> io::Result<u64> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| invalid("not UTF-8"))
    }

    fn files(&mut self) -> io::Result<CodeObject> {
        let mut files = CodeObject::default();
        for _ in 0..self.u32()? {
            let kind = self.u8()?;
            let key = self.string()?;
            if kind == 0 {
                files.data.insert(key, self.string()?);
            } else {
                files.binary_data.insert(key, self.bytes()?.to_vec());
            }
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_round_trip() {
        let mut files = CodeObject::from_text(&[("sync.jsonnet", "function(request) {}")]);
        files.binary_data.insert("b".into(), vec![0, 1, 2]);
        for request in [
            Request {
                memory_bytes: 256 << 20,
                digest: [7; 32],
                files: Some(files),
                entry: "sync.jsonnet".into(),
                request: b"{\"a\":1}".to_vec(),
            },
            Request {
                memory_bytes: 1,
                digest: [0; 32],
                files: None,
                entry: "e".into(),
                request: vec![],
            },
        ] {
            assert_eq!(Request::decode(&request.encode()).unwrap(), request);
        }
        for response in [
            Response::Body {
                body: b"{}".to_vec(),
                traces: vec!["TRACE: a".into()],
            },
            Response::Error {
                message: "boom".into(),
                traces: vec![],
            },
            Response::UnknownCode,
        ] {
            assert_eq!(Response::decode(&response.encode()).unwrap(), response);
        }
    }

    #[test]
    fn frames_round_trip_and_end_cleanly() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"hello").unwrap();
        let mut input = &wire[..];
        assert_eq!(read_frame(&mut input).unwrap().unwrap(), b"hello");
        assert_eq!(read_frame(&mut input).unwrap(), None);
        assert!(Request::decode(b"\x01\x02").is_err());
    }
}
