//! The engine releases Tandem knows (`releases.json`, made by `extract.py`
//! from the pinned wheels), and which of them a container image runs.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde::Deserialize;

/// A model server Tandem knows the command line of.
#[derive(Clone, Copy, Debug, Deserialize, Eq, Ord, PartialEq, PartialOrd)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Vllm,
    Sglang,
}

impl Engine {
    /// The engine's name as its project writes it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
        }
    }

    /// The image repositories the project publishes its server in.
    fn repositories(self) -> &'static [&'static str] {
        match self {
            Engine::Vllm => &["vllm/vllm-openai"],
            Engine::Sglang => &["lmsysorg/sglang"],
        }
    }
}

/// What one release's source defines, as `extract.py` read it.
#[derive(Debug, Deserialize)]
pub struct Release {
    pub engine: Engine,
    pub release: String,
    /// The wheel it was read from, and its sha256.
    pub wheel: String,
    pub sha256: String,
    /// Every option string the server's command line accepts.
    pub flags: BTreeSet<String>,
    /// Those that take no value.
    pub boolean_flags: BTreeSet<String>,
    /// vLLM: the KV connectors its factory registers.
    pub kv_connectors: BTreeSet<String>,
    /// SGLang: the choices of `--disaggregation-transfer-backend`.
    pub transfer_backends: BTreeSet<String>,
    /// The environment variables the engine itself reads.
    pub environment: BTreeSet<String>,
    /// The HTTP paths its OpenAI-compatible server serves.
    pub paths: BTreeSet<String>,
    /// The Prometheus metrics it exports.
    pub metrics: BTreeSet<String>,
}

impl Release {
    /// "vLLM 0.11.0".
    pub fn title(&self) -> String {
        format!("{} {}", self.engine.name(), self.release)
    }
}

#[derive(Deserialize)]
struct Table {
    releases: Vec<Release>,
}

/// The checked-in table, read once.
static TABLE: LazyLock<Vec<Release>> = LazyLock::new(|| {
    // The file is part of the build and `tests/unit/engines.rs` parses it,
    // so a table that does not parse fails the tests, not a running server.
    serde_json::from_str::<Table>(include_str!("releases.json"))
        .map(|t| t.releases)
        .unwrap_or_default()
});

/// Every release Tandem knows.
pub fn all() -> &'static [Release] {
    &TABLE
}

/// The release `version` of `engine`, if the table has it.
pub fn release(engine: Engine, version: &str) -> Option<&'static Release> {
    TABLE
        .iter()
        .find(|r| r.engine == engine && r.release == version)
}

/// The engine and version an image runs, read from its repository and tag:
/// `vllm/vllm-openai:v0.11.0`, `docker.io/lmsysorg/sglang:v0.5.2-cu126`.
/// None for another repository, an image named by digest alone, or a tag
/// that does not start with a version.
pub fn identify(image: &str) -> Option<(Engine, String)> {
    let without_digest = image.split('@').next().unwrap_or(image);
    // The tag follows the last colon after the last slash (a registry may
    // have a port).
    let slash = without_digest.rfind('/').map_or(0, |i| i.saturating_add(1));
    let (repository, tag) = match without_digest[slash..].rfind(':') {
        Some(colon) => {
            let at = slash.saturating_add(colon);
            (
                &without_digest[..at],
                &without_digest[at.saturating_add(1)..],
            )
        }
        None => return None,
    };
    let engine = [Engine::Vllm, Engine::Sglang].into_iter().find(|engine| {
        engine
            .repositories()
            .iter()
            .any(|known| repository == *known || repository.ends_with(&format!("/{known}")))
    })?;
    Some((engine, version_of(tag)?))
}

/// The version a tag starts with: `v0.5.2-cu126` is 0.5.2, `0.11.0` is
/// 0.11.0; `latest` or `nightly` has none.
fn version_of(tag: &str) -> Option<String> {
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let end = tag
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(tag.len());
    let version = tag[..end].trim_end_matches('.');
    let parts: Vec<&str> = version.split('.').collect();
    (parts.len() >= 2 && parts.iter().all(|p| !p.is_empty())).then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_holds_each_pinned_release() {
        let known: Vec<(Engine, &str)> = all()
            .iter()
            .map(|r| (r.engine, r.release.as_str()))
            .collect();
        for pinned in [
            (Engine::Vllm, "0.11.0"),
            (Engine::Vllm, "0.34.0"),
            (Engine::Sglang, "0.5.2"),
            (Engine::Sglang, "0.5.23"),
        ] {
            assert!(known.contains(&pinned), "{pinned:?} in {known:?}");
        }
        for release in all() {
            assert!(
                release.boolean_flags.is_subset(&release.flags),
                "{}: a boolean flag that is not a flag",
                release.title()
            );
            assert!(release.flags.len() > 50, "{}", release.title());
        }
    }

    #[test]
    fn an_image_names_its_engine_and_release() {
        let vllm = |v: &str| Some((Engine::Vllm, v.to_owned()));
        let sglang = |v: &str| Some((Engine::Sglang, v.to_owned()));
        assert_eq!(identify("vllm/vllm-openai:v0.11.0"), vllm("0.11.0"));
        assert_eq!(
            identify("docker.io/vllm/vllm-openai:v0.34.0"),
            vllm("0.34.0")
        );
        assert_eq!(identify("vllm/vllm-openai:0.11.0"), vllm("0.11.0"));
        assert_eq!(identify("lmsysorg/sglang:v0.5.2-cu126"), sglang("0.5.2"));
        assert_eq!(
            identify("registry.local:5000/lmsysorg/sglang:v0.5.23"),
            sglang("0.5.23")
        );
        assert_eq!(
            identify("vllm/vllm-openai:v0.11.0@sha256:0123"),
            vllm("0.11.0")
        );
        for other in [
            "vllm/vllm-openai:latest",
            "vllm/vllm-openai",
            "vllm/vllm-openai@sha256:0123",
            "ghcr.io/llm-d/llm-d-inference-sim:v0.10.2",
            "example.com/my-vllm-fork:v0.11.0",
            "registry.local:5000/vllm-openai",
        ] {
            assert_eq!(identify(other), None, "{other}");
        }
        assert!(release(Engine::Vllm, "0.11.0").is_some());
        assert!(release(Engine::Vllm, "0.10.0").is_none());
    }
}
