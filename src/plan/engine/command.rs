//! A container's command and args read as its engine's command line: where
//! the server's arguments start (the image's entrypoint, `vllm serve`,
//! `python3 -m …`, or inside a `sh -c` script), and each option as the
//! release's parser would take it: its spellings, its value, and the field
//! it was written in.

use super::releases::{Engine, Release};

/// One argument of the server's command line and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Word {
    pub text: String,
    /// The field path of the list item it is (or is in, for a script).
    pub field: String,
}

/// An option as the release's parser takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Given {
    /// The option string the release defines (`--tensor-parallel-size` for
    /// `--tensor_parallel_size` or `--tensor-parallel`).
    pub flag: String,
    /// The sub-key of a dotted option (`kv_connector` of
    /// `--kv-transfer-config.kv_connector`).
    pub key: Option<String>,
    pub value: Option<String>,
    /// Where its value was written: the next word's field, or the flag's own
    /// for `--flag=value`, `-O3` and a flag that takes none.
    pub field: String,
}

/// What the command line says, option by option.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommandLine {
    pub options: Vec<Given>,
    /// Options the release does not define, with the nearest it does.
    pub unknown: Vec<Unknown>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Unknown {
    pub written: String,
    pub field: String,
    /// The release's nearest flag, when one is close; or the candidates an
    /// ambiguous prefix matches.
    pub nearest: Vec<String>,
    pub ambiguous: bool,
}

impl CommandLine {
    /// The value of the first of `flags` given, if any was.
    pub fn value(&self, flags: &[&str]) -> Option<&Given> {
        self.options
            .iter()
            .find(|o| o.key.is_none() && flags.contains(&o.flag.as_str()))
    }

    /// Whether any of `flags` was given, in any form.
    pub fn has(&self, flags: &[&str]) -> bool {
        self.options
            .iter()
            .any(|o| flags.contains(&o.flag.as_str()))
    }
}

/// The server's arguments in a container running `engine`: None when the
/// command runs something Tandem cannot read as the engine's server (a
/// script that never starts it, an SGLang image with no command).
pub fn server_arguments(
    engine: Engine,
    command: &[String],
    args: &[String],
    field: &str,
) -> Option<Vec<Word>> {
    let words: Vec<Word> = command
        .iter()
        .enumerate()
        .map(|(i, text)| Word {
            text: text.clone(),
            field: format!("{field}.command[{i}]"),
        })
        .chain(args.iter().enumerate().map(|(i, text)| Word {
            text: text.clone(),
            field: format!("{field}.args[{i}]"),
        }))
        .collect();
    if command.is_empty() {
        // The image's entrypoint: vLLM's images start the OpenAI server
        // (`python3 -m vllm.entrypoints.openai.api_server` in 0.11, `vllm
        // serve` later), so the args are its arguments. SGLang's images
        // start a shell.
        return (engine == Engine::Vllm).then_some(words);
    }
    if let Some(rest) = after_server(engine, &words) {
        return Some(rest);
    }
    // A shell script: `sh -c "… && vllm serve …"`.
    let script_at = words.iter().position(|w| w.text == "-c")?;
    let script = words.get(script_at.saturating_add(1))?;
    shell_segments(&script.text)
        .into_iter()
        .find_map(|segment| {
            let words: Vec<Word> = segment
                .into_iter()
                .map(|text| Word {
                    text,
                    field: script.field.clone(),
                })
                .collect();
            after_server(engine, &words)
        })
}

/// The words after the one that starts `engine`'s server.
fn after_server(engine: Engine, words: &[Word]) -> Option<Vec<Word>> {
    let text = |i: usize| words.get(i).map(|w| w.text.as_str());
    let program = |i: usize| text(i).map(|t| t.rsplit('/').next().unwrap_or(t));
    let start = (0..words.len()).find_map(|i| match engine {
        Engine::Vllm
            if program(i) == Some("vllm") && text(i.saturating_add(1)) == Some("serve") =>
        {
            Some(i.saturating_add(2))
        }
        Engine::Vllm
            if text(i) == Some("-m")
                && text(i.saturating_add(1)) == Some("vllm.entrypoints.openai.api_server") =>
        {
            Some(i.saturating_add(2))
        }
        Engine::Sglang
            if text(i) == Some("-m")
                && text(i.saturating_add(1)) == Some("sglang.launch_server") =>
        {
            Some(i.saturating_add(2))
        }
        Engine::Sglang
            if program(i) == Some("sglang") && text(i.saturating_add(1)) == Some("serve") =>
        {
            Some(i.saturating_add(2))
        }
        _ => None,
    })?;
    Some(words.get(start..).unwrap_or_default().to_vec())
}

/// A shell script split into its simple commands (at `&&`, `||`, `;`, `|`
/// and newlines), each into words, with quotes removed. Expansions are left
/// as written.
fn shell_segments(script: &str) -> Vec<Vec<String>> {
    let mut segments = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut chars = script.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(next) = chars.next() {
                    word.get_or_insert_with(String::new).push(next);
                }
            }
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '\\') => {
                if let Some(next) = chars.next() {
                    word.get_or_insert_with(String::new).push(next);
                }
            }
            (None, ' ' | '\t') => {
                if let (Some(w), Some(segment)) = (word.take(), segments.last_mut()) {
                    segment.push(w);
                }
            }
            (None, '&' | '|' | ';' | '\n') => {
                if let (Some(w), Some(segment)) = (word.take(), segments.last_mut()) {
                    segment.push(w);
                }
                if matches!(chars.peek(), Some('&' | '|')) {
                    chars.next();
                }
                segments.push(Vec::new());
            }
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let (Some(w), Some(segment)) = (word, segments.last_mut()) {
        segment.push(w);
    }
    segments.retain(|s| !s.is_empty());
    segments
}

/// Reads the server's arguments as `release`'s parser would.
pub fn parse(release: &Release, words: &[Word]) -> CommandLine {
    let mut line = CommandLine::default();
    let mut i = 0usize;
    while let Some(word) = words.get(i) {
        i = i.saturating_add(1);
        let text = word.text.as_str();
        if !text.starts_with('-') || text == "-" || text == "--" || is_number(text) {
            // A positional (the model), or a value of an option read as
            // boolean.
            continue;
        }
        let (written, inline) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => match attached(release, text) {
                // `-O3`: a short option with its value attached, as
                // argparse reads it.
                Some((flag, value)) => (flag, Some(value.to_owned())),
                None => (text, None),
            },
        };
        match resolve(release, written) {
            Resolved::Flag { flag, key } => {
                let takes_value = key.is_some() || !release.boolean_flags.contains(&flag);
                let mut field = word.field.clone();
                let value = match inline {
                    Some(value) => Some(value),
                    None if takes_value => {
                        let next = words.get(i);
                        if let Some(next) = next {
                            field.clone_from(&next.field);
                            i = i.saturating_add(1);
                        }
                        next.map(|w| w.text.clone())
                    }
                    None => None,
                };
                line.options.push(Given {
                    flag,
                    key,
                    value,
                    field,
                });
            }
            Resolved::Unknown { nearest, ambiguous } => line.unknown.push(Unknown {
                written: written.to_owned(),
                field: word.field.clone(),
                nearest,
                ambiguous,
            }),
        }
    }
    line
}

/// A short option of `release` that takes a value, with the value
/// attached to it (`-O3`, `-tp8` is not: only a dash and one letter).
fn attached<'t>(release: &Release, text: &'t str) -> Option<(&'t str, &'t str)> {
    if text.starts_with("--") || release.flags.contains(text) {
        return None;
    }
    let flag = text.get(..2)?;
    let value = text.get(2..).filter(|v| !v.is_empty())?;
    (release.flags.contains(flag) && !release.boolean_flags.contains(flag)).then_some((flag, value))
}

enum Resolved {
    Flag {
        flag: String,
        key: Option<String>,
    },
    Unknown {
        nearest: Vec<String>,
        ambiguous: bool,
    },
}

/// The flag `written` names in `release`: as written; with vLLM, with
/// underscores read as dashes and a dotted sub-key split off (vLLM's
/// `FlexibleArgumentParser`); or as an unambiguous prefix (argparse's
/// `allow_abbrev`, on in both engines).
fn resolve(release: &Release, written: &str) -> Resolved {
    let (name, key) = match release.engine {
        Engine::Vllm if written.starts_with("--") => {
            let (name, key) = match written.split_once('.') {
                Some((name, key)) => (name, Some(key.to_owned())),
                None => (written, None),
            };
            (format!("--{}", name[2..].replace('_', "-")), key)
        }
        _ => (written.to_owned(), None),
    };
    if release.flags.contains(&name) {
        return Resolved::Flag { flag: name, key };
    }
    if name.starts_with("--") {
        let matches: Vec<&String> = release
            .flags
            .iter()
            .filter(|f| f.starts_with(&name))
            .collect();
        match matches.as_slice() {
            [only] => {
                return Resolved::Flag {
                    flag: (*only).clone(),
                    key,
                };
            }
            [] => {}
            several => {
                return Resolved::Unknown {
                    nearest: several.iter().map(|f| (*f).clone()).collect(),
                    ambiguous: true,
                };
            }
        }
    }
    Resolved::Unknown {
        nearest: nearest(&name, release.flags.iter()).into_iter().collect(),
        ambiguous: false,
    }
}

/// The closest of `known` to `written`, if it is close enough to be what
/// was meant (Jaro-Winkler similarity of at least 0.85).
pub fn nearest<'a>(written: &str, known: impl Iterator<Item = &'a String>) -> Option<String> {
    known
        .map(|k| (strsim::jaro_winkler(written, k), k))
        .filter(|(similarity, _)| *similarity >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.clone())
}

fn is_number(text: &str) -> bool {
    text.parse::<f64>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::super::releases::release;
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    fn texts(words: &[Word]) -> Vec<&str> {
        words.iter().map(|w| w.text.as_str()).collect()
    }

    #[test]
    fn the_server_arguments_start_after_the_server() {
        let field = "c";
        let read = |engine, command: &[&str], args: &[&str]| {
            server_arguments(engine, &strings(command), &strings(args), field)
        };
        let args = read(Engine::Vllm, &[], &["--model", "m"]).expect("entrypoint");
        assert_eq!(texts(&args), ["--model", "m"]);
        assert_eq!(args[1].field, "c.args[1]");
        assert_eq!(read(Engine::Sglang, &[], &["--model-path", "m"]), None);
        let serve =
            read(Engine::Vllm, &["vllm", "serve", "m"], &["--port", "8000"]).expect("serve");
        assert_eq!(texts(&serve), ["m", "--port", "8000"]);
        assert_eq!(serve[1].field, "c.args[0]");
        let module = read(
            Engine::Sglang,
            &["python3", "-m", "sglang.launch_server"],
            &["--tp-size", "2"],
        )
        .expect("module");
        assert_eq!(texts(&module), ["--tp-size", "2"]);
        let script = read(
            Engine::Vllm,
            &["/bin/sh", "-c"],
            &["ray start --head --port=6379 && vllm serve 'a b' --kv-transfer-config '{\"kv_connector\": \"X\"}'; echo done"],
        )
        .expect("script");
        assert_eq!(
            texts(&script),
            ["a b", "--kv-transfer-config", "{\"kv_connector\": \"X\"}"]
        );
        assert!(script.iter().all(|w| w.field == "c.args[0]"));
        assert_eq!(
            read(Engine::Vllm, &["sh", "-c", "sleep infinity"], &[]),
            None
        );
        assert_eq!(read(Engine::Vllm, &["python3", "serve.py"], &[]), None);
    }

    #[test]
    fn options_are_read_in_every_spelling_the_release_accepts() {
        let vllm = release(Engine::Vllm, "0.11.0").expect("pinned");
        let words: Vec<Word> = [
            "deepseek-ai/DeepSeek-R1",
            "--tensor_parallel_size",
            "16",
            "--kv-transfer-config.kv_connector",
            "NixlConnector",
            "--enforce-eager",
            "--max-num-seqs=8",
            "--served-model",
            "r1",
            "--tensor-paralel-size",
            "2",
            "--max",
            "-O3",
        ]
        .iter()
        .enumerate()
        .map(|(i, text)| Word {
            text: (*text).to_owned(),
            field: format!("args[{i}]"),
        })
        .collect();
        let line = parse(vllm, &words);
        let read: Vec<(&str, Option<&str>, Option<&str>)> = line
            .options
            .iter()
            .map(|o| (o.flag.as_str(), o.key.as_deref(), o.value.as_deref()))
            .collect();
        assert_eq!(
            read,
            [
                ("--tensor-parallel-size", None, Some("16")),
                (
                    "--kv-transfer-config",
                    Some("kv_connector"),
                    Some("NixlConnector")
                ),
                ("--enforce-eager", None, None),
                ("--max-num-seqs", None, Some("8")),
                ("--served-model-name", None, Some("r1")),
                ("-O", None, Some("3")),
            ]
        );
        assert_eq!(line.unknown.len(), 2, "{:?}", line.unknown);
        assert_eq!(line.unknown[0].written, "--tensor-paralel-size");
        assert_eq!(line.unknown[0].field, "args[9]");
        assert_eq!(line.unknown[0].nearest, ["--tensor-parallel-size"]);
        assert!(line.unknown[1].ambiguous, "--max is a prefix of several");
    }

    #[test]
    fn a_script_splits_at_its_operators_and_keeps_quoted_words_whole() {
        assert_eq!(
            shell_segments("a 'b c' \"d\\\"e\" && f|g; h\ni || j"),
            [
                strings(&["a", "b c", "d\"e"]),
                strings(&["f"]),
                strings(&["g"]),
                strings(&["h"]),
                strings(&["i"]),
                strings(&["j"]),
            ]
        );
    }
}
