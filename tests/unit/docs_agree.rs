//! The documentation holds to the code: each version, name or number a doc
//! states that the code, the tests' pins or the manifests also state is
//! read from both and compared. Each failure names the doc, what it says and
//! what the code says.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The docs a reader follows: README.md, docs/*.md, certs/README.md and
/// tests/cluster/README.md, as (path, text).
fn docs() -> Vec<(String, String)> {
    let mut paths = vec![
        "README.md".to_owned(),
        "certs/README.md".to_owned(),
        "tests/cluster/README.md".to_owned(),
    ];
    let mut pages: Vec<String> = std::fs::read_dir(repo("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|path| {
            let text = read(&path);
            (path, text)
        })
        .collect()
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The file under tests/ that holds `needle` (the tests' helpers are
/// moving, so they are found by what they hold, not by their path), as a
/// path relative to the repository and its text.
fn test_file_holding(needle: &str) -> (String, String) {
    let mut files = Vec::new();
    rust_files(&repo("tests"), &mut files);
    files.sort();
    for file in files.into_iter().filter(|f| !f.ends_with("docs_agree.rs")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if text.contains(needle) {
            let relative = file
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap()
                .to_string_lossy()
                .trim_start_matches('/')
                .to_owned();
            return (relative, text);
        }
    }
    panic!("no file under tests/ holds {needle:?}")
}

/// The version `go.mod` requires of `module`.
fn go_mod_version(path: &str, module: &str) -> String {
    read(path)
        .lines()
        .map(|l| l.trim().trim_start_matches("require").trim())
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(module)).then(|| words.next().map(str::to_owned))?
        })
        .unwrap_or_else(|| panic!("{path} requires no {module}"))
}

/// The version of the upstream CRD pin (tests' `upstream.rs`, `PINNED`)
/// whose `file` is `file`.
fn upstream_pin(file: &str) -> String {
    let (path, text) = test_file_holding("pub const PINNED");
    let at = text
        .find(&format!("file: \"{file}\""))
        .unwrap_or_else(|| panic!("{path} pins no {file}"));
    let rest = &text[at..];
    let rest = &rest[..rest.find('}').unwrap_or(rest.len())];
    let version = &rest[rest.find("version: \"").expect("a version") + 10..];
    version[..version.find('"').unwrap()].to_owned()
}

/// Every `vN.N.N` in `text`.
fn versions(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    for (i, _) in text.match_indices('v') {
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'.') {
            continue;
        }
        let tail: String = text[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let tail = tail.trim_end_matches('.');
        if tail.split('.').count() == 3 && tail.split('.').all(|p| !p.is_empty()) {
            found.push(format!("v{tail}"));
        }
    }
    found
}

/// The release each `{marker}vX.Y.Z` names, in order.
fn releases_after(text: &str, marker: &str) -> Vec<String> {
    text.match_indices(marker)
        .filter_map(|(i, _)| versions(&text[i + marker.len()..]).into_iter().next())
        .collect()
}

/// The table row of `doc` that starts with `start`.
fn row<'a>(doc: &str, text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("{doc} has no row starting {start:?}"))
}

#[test]
fn the_leader_worker_set_release_in_the_docs_is_the_one_the_tests_pin() {
    let manager = go_mod_version("tests/cluster/go.mod", "sigs.k8s.io/lws");
    let crd = upstream_pin("leaderworkerset.x-k8s.io_leaderworkersets.yaml");
    assert_eq!(
        manager, crd,
        "tests/cluster/go.mod builds the LWS manager {manager}, the tests' upstream.rs pins its CRD at {crd}"
    );
    let hint = tandem::plan::shared::installed::LEADER_WORKER_SET.install;
    assert!(
        hint.contains(&manager),
        "src/plan/shared/installed.rs says {hint:?}, the tests pin LWS {manager}"
    );
    for (doc, text) in docs() {
        for release in releases_after(&text, "lws/releases/download/") {
            assert_eq!(
                release, manager,
                "{doc} installs LWS {release}, the tests pin {manager}"
            );
        }
        for (i, _) in text.match_indices("'s LWS CRD") {
            let mut start = i.saturating_sub(10);
            while !text.is_char_boundary(start) {
                start += 1;
            }
            let said = versions(&text[start..i]);
            assert_eq!(
                said,
                std::slice::from_ref(&manager),
                "{doc} names {said:?}'s LWS CRD, the tests read {manager}'s"
            );
        }
    }
    let started = read("docs/getting-started.md");
    let lws = row(
        "docs/getting-started.md",
        &started,
        "| Every InferenceService |",
    );
    assert_eq!(
        versions(lws),
        std::slice::from_ref(&manager),
        "docs/getting-started.md's LeaderWorkerSet row says {:?}, the tests pin {manager}",
        versions(lws)
    );
    let compatibility = read("docs/compatibility.md");
    let lws = row(
        "docs/compatibility.md",
        &compatibility,
        "| LeaderWorkerSet | CRD and manager ",
    );
    assert!(
        lws.starts_with(&format!("| LeaderWorkerSet | CRD and manager {manager} ")),
        "docs/compatibility.md's row says {lws:?}, the tests pin {manager}"
    );
    let cluster = read("tests/cluster/README.md");
    for line in cluster.lines().filter(|l| l.contains("`sigs.k8s.io/lws`")) {
        assert!(
            line.ends_with(&format!("| {manager} |")),
            "tests/cluster/README.md says {line:?}, tests/cluster/go.mod pins {manager}"
        );
    }
}

#[test]
fn the_inference_extension_releases_in_the_docs_are_the_ones_the_tests_pin_and_run() {
    let crd = upstream_pin("inference.networking.k8s.io_inferencepools.yaml");
    let picker = go_mod_version(
        "tests/cluster/epp/go.mod",
        "sigs.k8s.io/gateway-api-inference-extension",
    );
    let image = tandem::plan::inference_service::router::DEFAULT_EPP_IMAGE;
    assert!(
        image.ends_with(&format!(":{picker}")),
        "the default picker is {image}, the tests build the picker of {picker} (tests/cluster/epp/go.mod)"
    );
    // The install is the picker's release, on purpose (getting-started and
    // compatibility say why), and so is the install hint.
    let hint = tandem::plan::shared::installed::INFERENCE_POOL.install;
    assert!(
        hint.contains(&picker),
        "src/plan/shared/installed.rs says {hint:?}, the picker the tests run is {picker}"
    );
    for (doc, text) in docs() {
        for release in releases_after(&text, "gateway-api-inference-extension/releases/download/") {
            assert_eq!(
                release, picker,
                "{doc} installs the Inference Extension {release}, the release of the picker the tests run is {picker}"
            );
        }
    }
    let started = read("docs/getting-started.md");
    let router = row("docs/getting-started.md", &started, "| A router role |");
    let compatibility = read("docs/compatibility.md");
    let pool = row(
        "docs/compatibility.md",
        &compatibility,
        "| Inference Extension | v",
    );
    for (doc, line) in [
        ("docs/getting-started.md", router),
        ("docs/compatibility.md", pool),
    ] {
        assert!(
            line.contains(&format!("{crd}'s InferencePool")),
            "{doc} does not say the InferencePool CRD tested is {crd}'s (tests' upstream.rs): {line}"
        );
        let other: BTreeSet<String> = versions(line)
            .into_iter()
            .filter(|v| *v != crd && *v != picker)
            .collect();
        assert!(
            other.is_empty(),
            "{doc} names {other:?}; the tests pin the CRD at {crd} and build the picker of {picker}: {line}"
        );
    }
    let cluster = read("tests/cluster/README.md");
    let pool = row("tests/cluster/README.md", &cluster, "| InferencePool v1 |");
    assert!(
        pool.ends_with(&format!("| {crd} |")),
        "tests/cluster/README.md says {pool:?}, the tests' upstream.rs pins {crd}"
    );
}

/// The lines of `text` inside ``` fences.
fn code_lines(text: &str) -> Vec<&str> {
    let mut inside = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if inside {
            lines.push(line.trim());
        }
    }
    lines
}

/// `curl ... -o NAME URL` of getting-started's code: (NAME, URL).
fn downloads(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for line in code_lines(text) {
        if !line.starts_with("curl ") || !line.contains("https://") || line.contains(" | ") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = words
            .iter()
            .position(|w| *w == "-o")
            .and_then(|i| words.get(i + 1))
            .unwrap_or_else(|| {
                panic!("docs/getting-started.md: {line:?} saves under the URL's name, not -o NAME")
            });
        let url = words
            .iter()
            .find(|w| w.starts_with("https://"))
            .expect("a URL");
        found.push(((*name).to_owned(), (*url).to_owned()));
    }
    found
}

/// The arguments of `-f` in every `check -f` of `text`, prose included.
fn checked_files(text: &str) -> Vec<String> {
    let mut files = Vec::new();
    for (i, _) in text.match_indices("check -f ") {
        let rest = &text[i + "check ".len()..];
        let end = rest.find(['`', '\n', '#', ')']).unwrap_or(rest.len());
        let words: Vec<&str> = rest[..end].split_whitespace().collect();
        for pair in words.windows(2).filter(|p| p[0] == "-f") {
            files.push(pair[1].to_owned());
        }
    }
    files
}

#[test]
fn getting_started_checks_every_file_it_downloads_under_a_name_of_its_own() {
    const DOC: &str = "docs/getting-started.md";
    let text = read(DOC);
    let downloaded = downloads(&text);
    assert!(
        !downloaded.is_empty(),
        "{DOC} downloads nothing for check -f"
    );
    let names: BTreeSet<&str> = downloaded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names.len(),
        downloaded.len(),
        "{DOC} saves two downloads under one name, the second overwriting the first: {downloaded:?}"
    );
    let applied: Vec<&str> = code_lines(&text)
        .into_iter()
        .filter(|l| l.starts_with("kubectl apply") || l.starts_with("kubectl create"))
        .collect();
    for (name, url) in &downloaded {
        assert!(
            applied.iter().any(|l| l.ends_with(&format!(" {url}"))),
            "{DOC} downloads {name} from {url}, which none of its install commands applies"
        );
    }
    let checked = checked_files(&text);
    for file in &checked {
        let folder_or_stdin = file.ends_with('/') || file == "-" || file.contains('|');
        assert!(
            folder_or_stdin || names.contains(file.as_str()),
            "{DOC} passes {file} to tandem check -f, but downloads only {names:?}"
        );
    }
    for name in names {
        assert!(
            checked.iter().any(|f| f == name),
            "{DOC} downloads {name} but gives it to no tandem check -f ({checked:?})"
        );
    }
}

#[test]
fn install_md_names_the_namespace_the_overlays_set() {
    const DOC: &str = "docs/install.md";
    let namespace = |path: &str| -> String {
        let value: Value = serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{e}"));
        value["namespace"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} sets no namespace"))
            .to_owned()
    };
    let default = namespace("manifests/kustomization.yaml");
    let moved = namespace("manifests/in-namespace/kustomization.yaml");
    let without = namespace("manifests/in-namespace-without-cert-manager/kustomization.yaml");
    assert_eq!(
        moved, without,
        "manifests/in-namespace/ sets {moved}, manifests/in-namespace-without-cert-manager/ {without}"
    );
    let text = read(DOC);
    assert!(
        text.contains(&format!("`{moved}`")),
        "{DOC} does not name {moved}, the namespace manifests/in-namespace*/ set"
    );
    let named: Vec<&str> = ["--namespace ", "-n "]
        .iter()
        .flat_map(|flag| {
            text.match_indices(flag)
                .filter_map(|(i, _)| text[i + flag.len()..].split_whitespace().next())
        })
        .map(|word| word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-'))
        .filter(|word| word.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .filter(|word| !word.is_empty())
        // cert-manager's own namespace, where the install waits for it.
        .filter(|word| *word != "cert-manager")
        .collect();
    for word in named {
        assert!(
            word == default || word == moved,
            "{DOC} uses the namespace {word}; the overlays set {default} (manifests/) and {moved} (manifests/in-namespace*/)"
        );
    }
}

/// Every key path of the chart's values, down to scalars and empty maps.
fn leaves(value: &Value, path: &str, found: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaves(child, &child_path, found);
            }
        }
        _ => found.push((path.to_owned(), value.clone())),
    }
}

/// The `code` spans of `text`, with `a.{b,c}` expanded to `a.b` and `a.c`.
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    for span in text.split('`').skip(1).step_by(2) {
        match (span.find('{'), span.rfind('}')) {
            (Some(open), Some(close)) if open < close && !span.contains(':') => {
                for part in span[open + 1..close].split(',') {
                    spans.push(format!(
                        "{}{}{}",
                        &span[..open],
                        part.trim(),
                        &span[close + 1..]
                    ));
                }
            }
            _ => spans.push(span.to_owned()),
        }
    }
    spans
}

#[test]
fn install_md_lists_every_chart_value_with_its_default() {
    const DOC: &str = "docs/install.md";
    let values: Value =
        serde_norway::from_str(&read("charts/tandem/values.yaml")).expect("values.yaml");
    let mut all = Vec::new();
    leaves(&values, "", &mut all);
    let text = read(DOC);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("| Value | Default |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(
        !table.is_empty(),
        "{DOC} has no table of the chart's values"
    );
    let named: BTreeSet<String> = table.iter().flat_map(|l| code_spans(l)).collect();
    for (path, _) in &all {
        let mut prefix = path.as_str();
        while !named.contains(prefix) {
            let Some(dot) = prefix.rfind('.') else {
                panic!(
                    "{DOC}'s table of chart values does not name {path} (charts/tandem/values.yaml)"
                );
            };
            prefix = &prefix[..dot];
        }
    }
    for line in table {
        let keys = line.split('|').nth(1).unwrap_or_default();
        let default = line.split('|').nth(2).unwrap_or_default();
        for key in code_spans(keys) {
            for (path, value) in all
                .iter()
                .filter(|(p, _)| *p == key || p.starts_with(&format!("{key}.")))
            {
                let said = match value {
                    Value::String(s) if s.is_empty() => continue,
                    Value::String(s) => s.clone(),
                    Value::Bool(_) | Value::Number(_) => value.to_string(),
                    _ => continue,
                };
                assert!(
                    default.contains(&said),
                    "{DOC}: the default of {key} says {:?}, values.yaml has {path}: {said}",
                    default.trim()
                );
            }
        }
    }
    let picker = row(DOC, &text, "| `endpointPicker.image` |");
    for image in [
        tandem::plan::inference_service::router::DEFAULT_EPP_IMAGE,
        tandem::plan::inference_service::router::LLM_D_EPP_IMAGE,
    ] {
        assert!(
            picker.contains(image),
            "{DOC}'s endpointPicker.image row does not name {image} (src/plan/inference_service/router.rs): {picker}"
        );
    }
}

/// The entries of the `const NAME: &[(...)] = &[ ... ];` list in `text`.
fn list_length(text: &str, name: &str) -> usize {
    let start = text
        .find(&format!("const {name}:"))
        .unwrap_or_else(|| panic!("no const {name}"));
    let body = &text[start..];
    let body = &body[..body.find("\n];").expect("the end of the list")];
    body.lines().filter(|l| *l == "    (").count()
}

#[test]
fn install_md_counts_the_shipped_grants_and_names_the_lists_of_unused_ones() {
    const DOC: &str = "docs/install.md";
    const RBAC: &str = "manifests/base/rbac.yaml";
    let documents = tandem::render::parse_world(RBAC, &read(RBAC), "default").expect("rbac.yaml");
    let grants = tandem::check::installation::shipped_grants(&documents, "tandem-system", "tandem");
    let text = read(DOC);
    let said = text
        .find(" grants is used")
        .map(|i| text[..i].rsplit(' ').next().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("{DOC} does not say how many grants {RBAC} holds"));
    assert_eq!(
        said,
        grants.len().to_string(),
        "{DOC} says {said} grants, {RBAC} grants Tandem {}",
        grants.len()
    );
    let mut excused = 0;
    for name in ["NOT_IN_THESE_SCENARIOS", "ON_A_CACHE_MISS"] {
        let (file, lists) = test_file_holding(&format!("const {name}:"));
        assert!(
            text.contains(&format!("`{file}`")),
            "{DOC} does not name {file}, which holds {name}"
        );
        assert!(
            text.contains(&format!("`{name}`")),
            "{DOC} does not name {name} ({file})"
        );
        excused += list_length(&lists, name);
    }
    let file = "the lists";
    let paragraph = text
        .split("\n\n")
        .find(|p| p.contains(" grants is used"))
        .expect("the paragraph on RBAC");
    for (i, _) in paragraph.match_indices("but for ") {
        let number: String = paragraph[i + 8..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !number.is_empty() {
            assert_eq!(
                number,
                excused.to_string(),
                "{DOC} excuses {number} grants, {file} lists {excused}"
            );
        }
    }
}

#[test]
fn the_build_times_the_docs_state_are_the_measured_ones() {
    const ANCHOR: &str = "BENCHMARKS.md#a-ci-runs-disk-and-time";
    let benchmarks = read("BENCHMARKS.md");
    let section = benchmarks
        .split("\n## ")
        .find(|s| s.starts_with("A CI run's disk and time"))
        .expect("BENCHMARKS.md has the section \"A CI run's disk and time\"");
    for doc in ["docs/developing.md", "tests/cluster/README.md"] {
        let text = read(doc);
        for paragraph in text.split("\n\n").filter(|p| p.contains("first build")) {
            assert!(
                !paragraph.contains("minutes"),
                "{doc} states a first build in minutes, not the measured time: {paragraph}"
            );
        }
        let links: Vec<usize> = text.match_indices(ANCHOR).map(|(i, _)| i).collect();
        assert!(!links.is_empty(), "{doc} does not link {ANCHOR}");
        for at in links {
            let start = text[..at]
                .rfind("\n\n")
                .unwrap_or(0)
                .max(at.saturating_sub(400));
            let before = &text[start..at];
            let seconds = before.match_indices(" s").filter(|(i, _)| {
                before[i + 2..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_whitespace() || ",.;)".contains(c))
            });
            for (i, _) in seconds {
                let number: String = before[..i]
                    .chars()
                    .rev()
                    .take_while(char::is_ascii_digit)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                if number.is_empty() {
                    continue;
                }
                assert!(
                    section.contains(&format!("{number} s")),
                    "{doc} says {number} s beside its link to {ANCHOR}, which measured no such time"
                );
            }
        }
    }
}

#[test]
fn every_doc_waits_for_cert_managers_webhook_before_applying_tandem() {
    const WAIT: &str = "kubectl -n cert-manager wait --for=condition=Available deployment --all";
    let with_cert_manager = [
        "manifests/",
        "manifests/dev/",
        "manifests/prod/",
        "manifests/in-namespace/",
    ];
    for (doc, text) in docs() {
        let mut waited = false;
        for line in code_lines(&text) {
            waited |= line.starts_with(WAIT);
            let applies = line
                .split("&&")
                .filter_map(|c| c.trim().strip_prefix("kubectl apply -k "))
                .filter_map(|target| target.split_whitespace().next())
                .any(|target| with_cert_manager.contains(&target));
            assert!(
                !applies || waited,
                "{doc} applies {line:?} with no `{WAIT}` before it: cert-manager's webhook may not answer yet"
            );
        }
    }
}

/// The README's requirements of the whole suite name the Rust version
/// Cargo.toml requires and the Go version the control plane's module does.
#[test]
fn the_readme_names_the_rust_and_go_versions_the_suite_needs() {
    const DOC: &str = "README.md";
    let text = read(DOC);
    let rust = read("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("Cargo.toml's rust-version");
    assert!(
        text.contains(&format!("Rust {rust} or newer")),
        "{DOC} does not say the suite needs Rust {rust} or newer (Cargo.toml's rust-version)"
    );
    let go = read("tests/cluster/go.mod")
        .lines()
        .find_map(|l| l.strip_prefix("go "))
        .map(|v| v.trim().trim_end_matches(".0").to_owned())
        .expect("tests/cluster/go.mod's go line");
    assert!(
        text.contains(&format!("Go {go} (")),
        "{DOC} does not say the suite needs Go {go} (tests/cluster/go.mod)"
    );
}
