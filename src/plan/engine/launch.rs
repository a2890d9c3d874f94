//! How the pods of a multi-node replica start their engine together, by
//! the engine release the server's image names.

use super::releases::{self, Engine, Release};

/// A multi-node replica's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// vLLM on Ray: a Ray head on the leader, then the serve command with
    /// `--distributed-executor-backend ray`; the workers join the head and
    /// block (seed 003, Example 2). vLLM 0.11.0 and any image Tandem does
    /// not know, as before the engine table.
    Ray,
    /// vLLM's own processes, without Ray (vLLM 0.34.0's images carry no Ray):
    /// `--nnodes`, `--node-rank`, `--master-addr` on every pod, the workers
    /// `--headless` (`vllm/entrypoints/cli/serve.py`, `run_headless`).
    VllmNodes,
    /// SGLang's: `--nnodes`, `--node-rank`, `--dist-init-addr` on every pod;
    /// a worker (rank ≥ 1) runs its schedulers and a health endpoint only
    /// (`sglang/srt/entrypoints/engine.py`).
    SglangNodes,
}

/// The flags vLLM starts across nodes with, without Ray.
pub const VLLM_NODE_FLAGS: [&str; 4] = ["--nnodes", "--node-rank", "--master-addr", "--headless"];
/// The flags SGLang starts across nodes with.
pub const SGLANG_NODE_FLAGS: [&str; 3] = ["--nnodes", "--node-rank", "--dist-init-addr"];

/// The start of a multi-node replica whose server runs `image`: a vLLM
/// release whose parser has [`VLLM_NODE_FLAGS`] starts without Ray; SGLang
/// always starts its own way (every release it publishes an image of has
/// these flags, and Ray is not how it spans nodes); anything else on Ray.
pub fn multi_node_launch(image: &str) -> Launch {
    match releases::identify(image) {
        Some((Engine::Vllm, version)) => {
            releases::release(Engine::Vllm, &version).map_or(Launch::Ray, launch_of_release)
        }
        Some((Engine::Sglang, _)) => Launch::SglangNodes,
        None => Launch::Ray,
    }
}

/// The start of a known release (see [`multi_node_launch`]).
pub fn launch_of_release(release: &Release) -> Launch {
    match release.engine {
        Engine::Sglang => Launch::SglangNodes,
        Engine::Vllm if VLLM_NODE_FLAGS.iter().all(|f| release.flags.contains(*f)) => {
            Launch::VllmNodes
        }
        Engine::Vllm => Launch::Ray,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_decides_how_a_replica_spans_nodes() {
        assert_eq!(multi_node_launch("vllm/vllm-openai:v0.11.0"), Launch::Ray);
        assert_eq!(
            multi_node_launch("vllm/vllm-openai:v0.34.0"),
            Launch::VllmNodes
        );
        assert_eq!(multi_node_launch("vllm/vllm-openai:latest"), Launch::Ray);
        assert_eq!(
            multi_node_launch("lmsysorg/sglang:v0.5.2"),
            Launch::SglangNodes
        );
        assert_eq!(
            multi_node_launch("lmsysorg/sglang:v0.5.23-cu129"),
            Launch::SglangNodes
        );
        assert_eq!(multi_node_launch("example.com/fork:v1"), Launch::Ray);
        // SGLang is started its own way whatever its release: each release
        // in the table has the flags that start uses.
        for release in releases::all()
            .iter()
            .filter(|r| r.engine == Engine::Sglang)
        {
            assert!(
                SGLANG_NODE_FLAGS.iter().all(|f| release.flags.contains(*f)),
                "{} lacks one of {SGLANG_NODE_FLAGS:?}",
                release.title()
            );
        }
    }
}
