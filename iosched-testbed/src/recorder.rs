//! `iosched-trace record` run as our child, for everything that records a workload from
//! outside: the scenario runner, `cargo xtask bench` and the real-kernel tests. It is started,
//! waited for until it says its programs are attached, and stopped with a signal as Ctrl-C
//! would; its stderr is kept line by line (and echoed, when asked) for the error messages.
//!
//! Only our own child is signalled, by pid; a recorder still running when the guard drops
//! (an error path) is killed.

use std::{
    ffi::OsStr,
    io::{self, BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use thiserror::Error;

/// What the recorder prints on stderr, at the start of a line, once its programs are attached.
pub const READY_LINE: &str = "recording: ready";
/// How long the recorder may take to drain and write its file after the signal.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Error)]
pub enum RecorderError {
    #[error("could not start {program}: {err}")]
    Spawn { program: String, err: io::Error },
    #[error("the recorder exited before it was ready ({status}); {said}")]
    ExitedEarly { status: ExitStatus, said: String },
    #[error("the recorder did not print {READY_LINE:?} within {secs} s; {said}")]
    NotReady { secs: u64, said: String },
    #[error("interrupted while the recorder started")]
    Interrupted,
    #[error("the recorder (pid {pid}) did not exit within {secs} s of signal {signal}; killed it")]
    StopTimeout { pid: u32, signal: i32, secs: u64 },
    #[error("the recorder exited with {status}; {said}")]
    Failed { status: ExitStatus, said: String },
    #[error("{what}: {err}")]
    Io { what: &'static str, err: io::Error },
}

pub struct Recorder {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    said: Vec<String>,
    /// Its stderr is echoed on ours as it comes.
    echoed: bool,
}

impl Recorder {
    /// `bin record -d DEV... -o OUTPUT OPTIONS...`, the command [`Recorder::spawn`] runs.
    pub fn command<S: AsRef<OsStr>>(
        bin: &Path,
        devices: &[&str],
        output: &Path,
        options: impl IntoIterator<Item = S>,
    ) -> Command {
        let mut command = Command::new(bin);
        command.arg("record");
        for d in devices {
            command.args(["-d", d]);
        }
        command.arg("-o").arg(output).args(options);
        command
    }

    /// Runs `command` (a [`Recorder::command`]) as our child: stdin and stdout null, stderr
    /// read line by line, and printed on ours after `echo` when given (`  [record] `).
    pub fn spawn(mut command: Command, echo: Option<&str>) -> Result<Self, RecorderError> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // It is stopped by SIGINT (SIGTERM on a timeout), so it must not inherit them
        // ignored: a shell runs `cmd &` with SIGINT ignored when job control is off, and a
        // program started that way (a script, `nohup ... &`) would pass the ignoring on. A
        // handler the recorder installs overrides it anyway; a shell's `trap` cannot.
        // SAFETY: between fork and exec only async-signal-safe calls: signal(2).
        unsafe {
            command.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM] {
                    if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            })
        };
        // A program written just before (the tests' fake recorders) is "busy" while a child
        // another thread forked meanwhile still holds its write descriptor, until that
        // child's exec closes it: a moment, so try again.
        let mut tries = 0;
        let mut child = loop {
            match command.spawn() {
                Err(err) if err.kind() == io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    thread::sleep(Duration::from_millis(20));
                }
                result => {
                    break result.map_err(|err| RecorderError::Spawn {
                        program: command.get_program().to_string_lossy().into_owned(),
                        err,
                    })?;
                }
            }
        };
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        let prefix = echo.map(str::to_owned);
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(prefix) = &prefix {
                    eprintln!("{prefix}{line}");
                }
                // The receiver may be gone (the guard dropped): keep reading, so that the
                // recorder never blocks on a full pipe.
                let _ = tx.send(line);
            }
        });
        Ok(Self {
            child: Some(child),
            lines,
            said: Vec::new(),
            echoed: echo.is_some(),
        })
    }

    /// Waits for [`READY_LINE`], at most `timeout`; fails if the recorder exits first, or as
    /// soon as `give_up()` returns true (polled every 100 ms: Ctrl-C).
    pub fn wait_ready(
        &mut self,
        timeout: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), RecorderError> {
        let deadline = Instant::now() + timeout;
        loop {
            if give_up() {
                return Err(RecorderError::Interrupted);
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match self.lines.recv_timeout(wait) {
                Ok(line) => {
                    let ready = line.starts_with(READY_LINE);
                    self.said.push(line);
                    if ready {
                        return Ok(());
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // stderr closed: the recorder is exiting; try_wait below sees it soon.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    thread::sleep(Duration::from_millis(50))
                }
            }
            let child = self.child.as_mut().expect("running until stopped");
            if let Some(status) = child.try_wait().map_err(|err| RecorderError::Io {
                what: "polling the recorder",
                err,
            })? {
                self.drain();
                return Err(RecorderError::ExitedEarly {
                    status,
                    said: self.said_text(),
                });
            }
            if Instant::now() >= deadline {
                return Err(RecorderError::NotReady {
                    secs: timeout.as_secs(),
                    said: self.said_text(),
                });
            }
        }
    }

    /// Sends `signal` (by pid: our own child, not yet reaped), waits for the exit (at most
    /// [`STOP_TIMEOUT`], then SIGKILL and an error) and keeps what it said last.
    pub fn stop_with(&mut self, signal: libc::c_int) -> Result<ExitStatus, RecorderError> {
        let mut child = self.child.take().expect("running until stopped");
        let pid = child.id();
        let io = |what| move |err| RecorderError::Io { what, err };
        if child
            .try_wait()
            .map_err(io("polling the recorder"))?
            .is_none()
        {
            let pid_t = libc::pid_t::try_from(pid).expect("pids fit pid_t");
            // SAFETY: kill(2) has no memory-safety preconditions. `pid` is our own child and
            // has not been reaped (we hold the Child and have not seen it exit), so it cannot
            // name another process.
            unsafe { libc::kill(pid_t, signal) };
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().map_err(io("waiting for the recorder"))? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RecorderError::StopTimeout {
                    pid,
                    signal,
                    secs: STOP_TIMEOUT.as_secs(),
                });
            }
            thread::sleep(Duration::from_millis(20));
        };
        self.drain();
        Ok(status)
    }

    /// SIGINT, as Ctrl-C would; fails unless the recorder then exits successfully.
    pub fn stop(&mut self) -> Result<(), RecorderError> {
        let status = self.stop_with(libc::SIGINT)?;
        if !status.success() {
            return Err(RecorderError::Failed {
                status,
                said: self.said_text(),
            });
        }
        Ok(())
    }

    /// Whether the recorder has not been stopped yet.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Its pid, until stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Every line it printed on stderr so far (after a stop: all of them).
    pub fn said(&self) -> &[String] {
        &self.said
    }

    /// Takes the lines still in the pipe: until its end (the recorder has exited), or half a
    /// second without one.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.said.push(line);
        }
    }

    fn said_text(&self) -> String {
        if self.echoed {
            "see its output above".to_owned()
        } else {
            format!("it said:\n{}", self.said.join("\n"))
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::tempdir::TempDir;

    /// A stand-in for the recorder: a shell script that prints what `script` says.
    fn fake(dir: &Path, script: &str) -> std::path::PathBuf {
        let bin = dir.join("fake-recorder");
        std::fs::write(&bin, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    #[test]
    fn the_command_names_each_device() {
        let c = Recorder::command(
            Path::new("/bin/rec"),
            &["loop0", "loop1"],
            Path::new("/tmp/x.istrace"),
            ["--wakeups"],
        );
        let args: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "record",
                "-d",
                "loop0",
                "-d",
                "loop1",
                "-o",
                "/tmp/x.istrace",
                "--wakeups"
            ]
        );
    }

    #[test]
    fn waits_for_ready_then_stops_on_sigint() {
        let dir = TempDir::new(&std::env::temp_dir(), "iosched-testbed-recorder-test").unwrap();
        // Says it is ready, then runs until SIGINT and says goodbye.
        let bin = fake(
            dir.path(),
            "trap 'echo \"recorded 3 events\" >&2; exit 0' INT\n\
             echo 'note: starting' >&2\necho 'recording: ready (2 programs)' >&2\n\
             while :; do sleep 0.05; done",
        );
        let command = Recorder::command(&bin, &["loop0"], &dir.path().join("out"), [""; 0]);
        let mut recorder = Recorder::spawn(command, None).unwrap();
        recorder
            .wait_ready(Duration::from_secs(10), &|| false)
            .unwrap();
        assert!(recorder.running());
        recorder.stop().unwrap();
        assert!(!recorder.running());
        assert_eq!(
            recorder.said(),
            [
                "note: starting",
                "recording: ready (2 programs)",
                "recorded 3 events"
            ]
        );
    }

    #[test]
    fn an_early_exit_is_an_error_with_what_it_said() {
        let dir = TempDir::new(&std::env::temp_dir(), "iosched-testbed-recorder-test").unwrap();
        let bin = fake(dir.path(), "echo 'error: no such device' >&2; exit 1");
        let command = Recorder::command(&bin, &["nope"], &dir.path().join("out"), [""; 0]);
        let mut recorder = Recorder::spawn(command, None).unwrap();
        let err = recorder
            .wait_ready(Duration::from_secs(10), &|| false)
            .unwrap_err();
        assert!(matches!(err, RecorderError::ExitedEarly { .. }), "{err:?}");
        assert!(err.to_string().contains("error: no such device"), "{err}");
        // Giving up (Ctrl-C) is checked before anything else.
        let command = Recorder::command(&bin, &["nope"], &dir.path().join("out"), [""; 0]);
        let mut recorder = Recorder::spawn(command, None).unwrap();
        let err = recorder
            .wait_ready(Duration::from_secs(10), &|| true)
            .unwrap_err();
        assert!(matches!(err, RecorderError::Interrupted), "{err:?}");
    }
}
