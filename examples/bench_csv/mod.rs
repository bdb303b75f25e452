//! `--csv FILE` for the benchmark examples: one line per figure, `fs,phase,metric,value,unit`,
//! which the bench/ wrappers turn into their CSV (bench/lib.sh puts the benchmark's name in
//! front). No figure is written without the option.

use std::io::Write;
use std::path::Path;

pub struct Csv(Option<std::fs::File>);

impl Csv {
    pub fn create(path: Option<&Path>) -> Csv {
        Csv(path.map(|p| {
            std::fs::File::create(p).unwrap_or_else(|e| panic!("--csv {}: {e}", p.display()))
        }))
    }

    pub fn row(&mut self, fs: &str, phase: &str, metric: &str, value: f64, unit: &str) {
        let Some(f) = &mut self.0 else { return };
        for field in [fs, phase, metric, unit] {
            assert!(!field.contains(','), "CSV field with a comma: {field}");
        }
        writeln!(f, "{fs},{phase},{metric},{value},{unit}").expect("write the CSV");
    }
}
