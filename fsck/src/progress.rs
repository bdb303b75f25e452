//! The progress bar: shown on a terminal (stderr) once a check has taken more than a moment,
//! never when stderr is not a terminal.

use dualfs::check::{Progress, ProgressFn};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a check runs before the bar appears.
const DELAY: Duration = Duration::from_millis(400);

struct State {
    started: Instant,
    bar: Option<ProgressBar>,
    pass: Option<u8>,
    /// Set while a question is on the terminal.
    hidden: bool,
}

/// A progress bar that may never show.
#[derive(Clone)]
pub struct Bar {
    state: Option<Arc<Mutex<State>>>,
}

impl Bar {
    /// A bar on stderr if `wanted` and stderr is a terminal; else one that does nothing.
    pub fn for_stderr(wanted: bool) -> Bar {
        let on = wanted && std::io::stderr().is_terminal();
        Bar {
            state: on.then(|| {
                Arc::new(Mutex::new(State {
                    started: Instant::now(),
                    bar: None,
                    pass: None,
                    hidden: false,
                }))
            }),
        }
    }

    /// The callback for `check::Options::progress`.
    pub fn callback(&self) -> Option<ProgressFn> {
        let state = self.state.clone()?;
        Some(Arc::new(move |p: &Progress| update(&state, p)))
    }

    /// Take the bar off the terminal (before printing, or for good).
    pub fn finish(&self) {
        if let Some(s) = &self.state {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = s.bar.take() {
                b.finish_and_clear();
            }
            s.pass = None;
        }
    }

    /// Hide the bar while a question is asked; `false` lets it come back.
    pub fn hide(&self, hidden: bool) {
        if let Some(s) = &self.state {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.hidden = hidden;
            if hidden {
                if let Some(b) = s.bar.take() {
                    b.finish_and_clear();
                }
                s.pass = None;
            }
        }
    }
}

fn update(state: &Mutex<State>, p: &Progress) {
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    if s.hidden || (s.bar.is_none() && s.started.elapsed() < DELAY) {
        return;
    }
    if s.bar.is_none() {
        let b = ProgressBar::with_draw_target(Some(p.total), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{prefix:>9} {msg:<16} [{bar:30}] {pos}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        s.bar = Some(b);
    }
    if s.pass != Some(p.pass) {
        if let Some(bar) = &s.bar {
            bar.set_prefix(format!("pass {}/{}", p.pass + 1, p.passes));
            bar.set_message(p.name);
        }
        s.pass = Some(p.pass);
    }
    let bar = s.bar.as_ref().expect("made above");
    bar.set_length(p.total.max(p.done).max(1));
    bar.set_position(p.done);
}
