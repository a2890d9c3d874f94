//! The engine table (`src/plan/engine/releases.json`) is what the pinned
//! vLLM and SGLang wheels define: `extract.py` downloads each wheel from
//! PyPI with pip, checks its sha256, reads the flags, connectors, transfer
//! backends, variables, paths and metrics out of its source, and must print
//! the checked-in table byte for byte. Without PyPI the test is skipped with
//! the reason; with `CI=true` that is a failure.

use std::process::Command;

use harness::*;

const SCRIPT: &str = "src/plan/engine/extract.py";
const TABLE: &str = "src/plan/engine/releases.json";

/// The exit code `extract.py` gives when PyPI cannot be reached.
const UNREACHABLE: i32 = 3;

#[test]
fn the_engine_table_is_what_the_pinned_wheels_define() {
    let cache = target_dir().join("tmp").join("engine-wheels");
    let run = Command::new("python3")
        .arg(repo_path(SCRIPT))
        .arg("--cache")
        .arg(&cache)
        .output();
    let found = match run {
        Err(e) => Err(format!("python3 cannot run: {e}")),
        Ok(out) if out.status.code() == Some(UNREACHABLE) => Err(format!(
            "PyPI cannot be reached: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(out) => Ok(out),
    };
    let Some(out) = available("the_engine_table_is_what_the_pinned_wheels_define", found) else {
        return;
    };
    assert!(
        out.status.success(),
        "{SCRIPT} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checked_in = std::fs::read_to_string(repo_path(TABLE)).expect("the table");
    let extracted = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        checked_in == extracted,
        "{TABLE} is not what the pinned wheels define; regenerate it with \
         `python3 {SCRIPT} --cache target/tmp/engine-wheels > {TABLE}`"
    );
}
