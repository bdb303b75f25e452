//! Interactive repairs: one question per kind of repair, on the terminal.

use crate::progress::Bar;
use dualfs::check::repair::Question;
use std::io::{BufRead, Write};

/// Repairs shown with a question.
const SHOWN: usize = 10;

pub struct Asker<'a> {
    bar: &'a Bar,
    /// "a" was answered: yes to everything from now on.
    all: bool,
}

impl<'a> Asker<'a> {
    pub fn new(bar: &'a Bar) -> Asker<'a> {
        Asker { bar, all: false }
    }

    pub fn ask(&mut self, q: &Question) -> bool {
        if self.all {
            return true;
        }
        self.bar.hide(true);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "\n{} repair(s) of this kind are needed:",
            q.fixes.len()
        );
        for f in q.fixes.iter().take(SHOWN) {
            let _ = writeln!(out, "  {f}");
        }
        if q.fixes.len() > SHOWN {
            let _ = writeln!(out, "  ... and {} more", q.fixes.len() - SHOWN);
        }
        let safe = if q.class.is_safe() {
            "loses nothing"
        } else {
            "gives something up"
        };
        let answer = loop {
            let _ = write!(
                out,
                "{} ({safe})? [y]es, [n]o, [a]ll: ",
                q.class.description()
            );
            let _ = out.flush();
            let mut line = String::new();
            match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => break false, // end of input: no
                Ok(_) => {}
            }
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => break true,
                "n" | "no" => break false,
                "a" | "all" => {
                    self.all = true;
                    break true;
                }
                _ => continue,
            }
        };
        drop(out);
        self.bar.hide(false);
        answer
    }
}
