//! The worker process: reads evaluation requests on stdin, answers on stdout, one at a
//! time. The main thread only reads stdin, so the end of input (the controller went away)
//! ends the worker at once, even mid-evaluation; evaluations run on one long-lived thread
//! that keeps the parsed code of the last few digests.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::Arc;

use super::frame::{self, Request, Response};
use crate::inprocess::jsonnet::{take_traces, Program};

/// The evaluation thread's stack. jrsonnet grows its stack on demand in deep recursion;
/// this only needs to hold the frames between two of its checks.
const EVAL_STACK_BYTES: usize = 16 << 20;
/// Code digests a worker keeps parsed; the least recently used is dropped past this.
const CACHED_PROGRAMS: usize = 8;
/// Data (heap, stacks, the binary's own data) the worker needs besides the evaluation:
/// the soft `RLIMIT_DATA` is the hook's memory limit plus this. Measured: an idle worker's
/// VmData is about 20 MiB, most of it the evaluation thread's stack.
pub(crate) const DATA_OVERHEAD_BYTES: u64 = 48 << 20;

/// The worker program's main: serves requests until stdin ends. The binary calls it for
/// its hidden `jsonnet-worker` command, before setting up anything else.
pub fn run_worker() -> ExitCode {
    die_with_parent();
    let (requests, inbox) = mpsc::sync_channel::<Request>(1);
    let spawned = std::thread::Builder::new()
        .name("jsonnet".into())
        .stack_size(EVAL_STACK_BYTES)
        .spawn(move || serve(inbox));
    if let Err(error) = spawned {
        eprintln!("jsonnet worker: can't start the evaluation thread: {error}");
        return ExitCode::FAILURE;
    }
    let mut input = io::stdin().lock();
    loop {
        let request = match frame::read_frame(&mut input) {
            Ok(Some(payload)) => Request::decode(&payload),
            // The controller closed our input or is gone: nothing to answer to.
            Ok(None) => std::process::exit(0),
            Err(error) => Err(error),
        };
        let sent = request.map(|request| requests.send(request).is_ok());
        match sent {
            Ok(true) => {}
            Ok(false) => return ExitCode::FAILURE,
            Err(error) => {
                eprintln!("jsonnet worker: {error}");
                return ExitCode::from(2);
            }
        }
    }
}

/// Evaluates requests in order, answering each on stdout.
fn serve(inbox: mpsc::Receiver<Request>) {
    let mut programs: Vec<([u8; 32], Program)> = Vec::new();
    for request in inbox {
        limit_data(request.memory_bytes.saturating_add(DATA_OVERHEAD_BYTES));
        let response = answer(&mut programs, request);
        let mut out = io::stdout().lock();
        if frame::write_frame(&mut out, &response.encode()).is_err() {
            std::process::exit(0);
        }
        let _ = out.flush();
    }
}

fn answer(programs: &mut Vec<([u8; 32], Program)>, request: Request) -> Response {
    let position = programs.iter().position(|(d, _)| *d == request.digest);
    let program = match (position, request.files) {
        (Some(i), _) => programs.remove(i).1,
        (None, Some(files)) => Program::new(Arc::new(files)),
        (None, None) => return Response::UnknownCode,
    };
    take_traces();
    let result = program.evaluate(&request.entry, &request.request);
    let traces = take_traces();
    programs.push((request.digest, program));
    if programs.len() > CACHED_PROGRAMS {
        programs.remove(0);
    }
    match result {
        Ok(body) => Response::Body { body, traces },
        Err(message) => Response::Error { message, traces },
    }
}

/// Caps the process's data (heap and anonymous memory) at `bytes`: an allocation past it
/// fails and the worker aborts, which the controller reports as the memory limit.
#[cfg(unix)]
fn limit_data(bytes: u64) {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_DATA, &mut current) != 0 {
            return;
        }
        let wanted = libc::rlimit {
            rlim_cur: (bytes as libc::rlim_t).min(current.rlim_max),
            rlim_max: current.rlim_max,
        };
        libc::setrlimit(libc::RLIMIT_DATA, &wanted);
    }
}

#[cfg(not(unix))]
fn limit_data(_bytes: u64) {}

/// Asks the kernel to kill this worker when the controller dies (Linux), so that no
/// evaluation outlives it even if it is killed with SIGKILL.
#[cfg(target_os = "linux")]
fn die_with_parent() {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    }
    // A parent gone before this call is noticed as the end of stdin (no getppid check:
    // the controller may itself be PID 1 in its container).
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent() {}
