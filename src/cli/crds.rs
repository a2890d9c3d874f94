//! `tandem crds`: the CustomResourceDefinitions, printed or written.

use std::path::PathBuf;
use std::process::ExitCode;

use super::fail;
use crate::api;

pub(super) fn crds(out_dir: Option<PathBuf>) -> ExitCode {
    let all = api::crds::all();
    let mut printed = Vec::new();
    for crd in &all {
        let yaml = match api::crds::to_yaml(crd) {
            Ok(yaml) => yaml,
            Err(e) => return fail(format!("could not write a CRD as YAML: {e}")),
        };
        match &out_dir {
            Some(dir) => {
                let path = dir.join(api::crds::file_name(crd));
                if let Err(e) =
                    std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, yaml))
                {
                    return fail(format!("could not write {}: {e}", path.display()));
                }
                println!("wrote {}", path.display());
            }
            None => printed.push(yaml),
        }
    }
    if out_dir.is_none() {
        print!("{}", printed.join("---\n"));
    }
    ExitCode::SUCCESS
}
