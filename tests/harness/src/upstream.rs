//! The upstream CRDs the tests check Tandem's objects against and install in
//! the control plane (LeaderWorkerSet, Volcano's PodGroup, Gateway API,
//! InferencePool), taken from their own Go modules at pinned versions through
//! the Go module proxy, each held to the module's checksum (as go.sum records
//! it) and to the file's own sha256: the files are upstream's, unchanged, and
//! never copied into this repository. They are laid out once per pin list in
//! `target/tmp/upstream-crds/<key>/` with the names `../shared/crds` uses, so
//! `TANDEM_UPSTREAM_CRDS` can still name another folder of the same files (a
//! machine without the proxy).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use ring::digest::{Context, SHA256, digest};
use serde_json::Value;

/// One upstream CRD file: the Go module and version it comes from, the
/// module's checksum, its path in the module, and the file's sha256.
pub struct Pinned {
    /// Its name in the folder the tests read.
    pub file: &'static str,
    pub module: &'static str,
    pub version: &'static str,
    /// `h1:` of the module, as the Go checksum database records it.
    pub module_sum: &'static str,
    pub path: &'static str,
    pub sha256: &'static str,
}

/// Every upstream CRD the tests read, pinned.
///
/// The LeaderWorkerSet CRD is v0.9.0's, the release the tests' LWS manager
/// is built from (the proxy does not serve v0.10.0's source; the two CRDs
/// differ in one integer's bounds).
pub const PINNED: [Pinned; 7] = [
    Pinned {
        file: "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        module: "sigs.k8s.io/lws",
        version: "v0.9.0",
        module_sum: "h1:DcJCgxjjoGOx//QHZkeKpyiblxYq70aCRZNYSfykWyI=",
        path: "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        sha256: "92382b4a4eac032dbbce7eb9bb1e4e7e99880a30656f90649aeb284ce9dc732a",
    },
    Pinned {
        file: "scheduling.volcano.sh_podgroups.yaml",
        module: "volcano.sh/volcano",
        version: "v1.15.1",
        module_sum: "h1:M0iGzhy1dvod2GFy1QiyWdv1jmmNfHW4+2WoRU7CIAk=",
        path: "config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml",
        sha256: "c297c0fdcf00cea6a35daa2b6153a8590b56df0e22a96dbfa44f773814685017",
    },
    Pinned {
        file: "gateway.networking.k8s.io_gatewayclasses.yaml",
        module: "sigs.k8s.io/gateway-api",
        version: "v1.6.1",
        module_sum: "h1:mock6phZbI6rvZerwrVNk7hVNymQgHo+6sJ81Ia7ftY=",
        path: "config/crd/standard/gateway.networking.k8s.io_gatewayclasses.yaml",
        sha256: "53710048ba26f8620eed59d5e51b157ecf040daf5c6eef31a4b991e0808c4be5",
    },
    Pinned {
        file: "gateway.networking.k8s.io_gateways.yaml",
        module: "sigs.k8s.io/gateway-api",
        version: "v1.6.1",
        module_sum: "h1:mock6phZbI6rvZerwrVNk7hVNymQgHo+6sJ81Ia7ftY=",
        path: "config/crd/standard/gateway.networking.k8s.io_gateways.yaml",
        sha256: "25b885f5870b8fff1ae82efa2628b2761cef3745900c2aecf8fb76629a01255a",
    },
    Pinned {
        file: "gateway.networking.k8s.io_httproutes.yaml",
        module: "sigs.k8s.io/gateway-api",
        version: "v1.6.1",
        module_sum: "h1:mock6phZbI6rvZerwrVNk7hVNymQgHo+6sJ81Ia7ftY=",
        path: "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",
        sha256: "a424a0d6c953b162e71d1d97bb7e75012d8f1ac264e7274f2763d1b96ab39852",
    },
    Pinned {
        file: "inference.networking.k8s.io_inferencepools.yaml",
        module: "sigs.k8s.io/gateway-api-inference-extension",
        version: "v1.6.0",
        module_sum: "h1:cjtwMJYcTnLXBYE5ffR1/hHhn7U1aIFfe2RITYmOXVA=",
        path: "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
        sha256: "55e0dbf39c50c4bbdd60106493a4573df4bb44479f9ce46762f1af718883e5cd",
    },
    Pinned {
        file: "inference.networking.x-k8s.io_inferencepools.v1alpha2.yaml",
        module: "sigs.k8s.io/gateway-api-inference-extension",
        version: "v1.2.1",
        module_sum: "h1:kQjnFWW8YLCN42EZxDNxTuDE0xHkPkoyaEVpQ5sNCBQ=",
        path: "config/crd/bases/inference.networking.x-k8s.io_inferencepools.yaml",
        sha256: "133835d2e5f18524d4ecb165741eff814291ecbf01880eddac8cd9972d32f61a",
    },
];

/// Volcano v1.13.3's PodGroup CRD (no `subGroupPolicy`), in `older/` as in
/// `../shared/crds`. No zip of Volcano v1.10 to v1.13 is served, so it is
/// generated as Volcano generates it: controller-gen v0.18.0 over
/// volcano.sh/apis v1.13.0 (`tests/cluster/volcano-crd`), and held to the
/// sha256 of the file Volcano v1.13.3 released.
pub const VOLCANO_1_13: (&str, &str) = (
    "older/scheduling.volcano.sh_podgroups.v1.13.yaml",
    "c30e6eea145258a207c310fdcf1cbcdfafc48031c74413e361381b2d19eee01f",
);

/// The folder of upstream CRDs, laid out on first use, or why it cannot be
/// (no Go toolchain, no module proxy, a checksum that does not match).
pub fn fetched() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(lay_out)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(Clone::clone)
}

fn lay_out() -> Result<PathBuf, String> {
    let generator = super::repo_path("tests/cluster/volcano-crd");
    let mut key = Context::new(&SHA256);
    for pin in &PINNED {
        key.update(
            format!(
                "{} {} {} {}\n",
                pin.file, pin.module, pin.version, pin.sha256
            )
            .as_bytes(),
        );
    }
    key.update(VOLCANO_1_13.1.as_bytes());
    for file in ["go.mod", "go.sum", "generate.go"] {
        key.update(&std::fs::read(generator.join(file)).map_err(|e| format!("{file}: {e}"))?);
    }
    let key = hex(key.finish().as_ref())[..16].to_owned();
    let root = crate::target_dir().join("tmp").join("upstream-crds");
    let dir = root.join(&key);
    if dir.join(VOLCANO_1_13.0).is_file() {
        return Ok(dir);
    }
    let partial = root.join(format!("{key}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(partial.join("older")).map_err(|e| e.to_string())?;
    for pin in &PINNED {
        let module = download(pin.module, pin.version, pin.module_sum)?;
        let text = std::fs::read(module.join(pin.path))
            .map_err(|e| format!("{}@{}: {}: {e}", pin.module, pin.version, pin.path))?;
        check_sha256(
            &text,
            pin.sha256,
            &format!("{}@{} {}", pin.module, pin.version, pin.path),
        )?;
        std::fs::write(partial.join(pin.file), text).map_err(|e| e.to_string())?;
    }
    let generated = generate_volcano_1_13(&generator, &partial)?;
    check_sha256(
        &generated,
        VOLCANO_1_13.1,
        "Volcano v1.13's PodGroup CRD, generated",
    )?;
    std::fs::write(partial.join(VOLCANO_1_13.0), generated).map_err(|e| e.to_string())?;
    // Another test binary may have laid it out meanwhile: either copy is the same.
    match std::fs::rename(&partial, &dir) {
        Ok(()) => Ok(dir),
        Err(_) if dir.join(VOLCANO_1_13.0).is_file() => {
            let _ = std::fs::remove_dir_all(&partial);
            Ok(dir)
        }
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

/// `go mod download` of `module@version`: its directory in the module
/// cache, once its checksum is the pinned one.
pub fn download(module: &str, version: &str, sum: &str) -> Result<PathBuf, String> {
    let output = Command::new("go")
        .args(["mod", "download", "-json", &format!("{module}@{version}")])
        .current_dir(std::env::temp_dir())
        .output()
        .map_err(|e| format!("running go: {e}"))?;
    let answer: Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "go mod download {module}@{version}: {e}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    if !output.status.success() || !answer["Error"].is_null() {
        return Err(format!(
            "go mod download {module}@{version}: {}",
            answer["Error"]
        ));
    }
    if answer["Sum"] != sum {
        return Err(format!(
            "{module}@{version} has checksum {}, not the pinned {sum}",
            answer["Sum"]
        ));
    }
    answer["Dir"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| format!("go mod download {module}@{version}: no directory"))
}

fn generate_volcano_1_13(module: &Path, scratch: &Path) -> Result<Vec<u8>, String> {
    let generator = scratch.join("controller-gen");
    let run = |command: &mut Command, what: &str| -> Result<(), String> {
        let output = command
            .current_dir(module)
            .env("GOFLAGS", "-mod=readonly")
            .output()
            .map_err(|e| format!("{what}: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what}: {}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    };
    run(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&generator)
            .arg("sigs.k8s.io/controller-tools/cmd/controller-gen"),
        "building controller-gen",
    )?;
    let out = scratch.join("generated");
    run(
        Command::new(&generator)
            .arg("crd")
            .arg("paths=volcano.sh/apis/pkg/apis/scheduling/v1beta1")
            .arg(format!("output:crd:dir={}", out.display())),
        "controller-gen crd",
    )?;
    let text = std::fs::read(out.join("scheduling.volcano.sh_podgroups.yaml"))
        .map_err(|e| format!("the generated PodGroup CRD: {e}"))?;
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_file(&generator);
    Ok(text)
}

fn check_sha256(text: &[u8], pinned: &str, what: &str) -> Result<(), String> {
    let found = hex(digest(&SHA256, text).as_ref());
    if found == pinned {
        Ok(())
    } else {
        Err(format!(
            "{what} has sha256 {found}, not the pinned {pinned}"
        ))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
