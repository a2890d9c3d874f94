//! The logs of `tandem serve` and the other commands: tracing to stderr, as
//! text or JSON, with ANSI colour only when stderr is a terminal, and the
//! `log` records of the libraries (rustls) bridged into tracing, with the
//! per-connection rustls warnings a client causes (not Tandem) at debug.

use std::ffi::OsString;
use std::io::IsTerminal;

/// What `--log-format` chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Colour codes only on a terminal, and never with `NO_COLOR` set
/// (<https://no-color.org>): files and pipes get plain text.
pub fn use_colour(is_terminal: bool, no_color: Option<OsString>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The level a library's `log` record is shown at: rustls warns on every
/// ClientHello whose SNI is an IP address or otherwise illegal (a client
/// connecting by IP, a probe or a scanner), which is the client's business
/// and says nothing about Tandem, so those warnings are debug.
pub fn level_of(target: &str, message: &str, level: log::Level) -> log::Level {
    if target.starts_with("rustls") && message.starts_with("Illegal SNI") {
        // log's levels grow more verbose upwards: Warn becomes Debug, Trace
        // stays Trace.
        level.max(log::Level::Debug)
    } else {
        level
    }
}

/// Forwards `log` records to tracing, at [`level_of`].
struct Bridge;

impl log::Log for Bridge {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        // tracing's filter decides, once the record's level is known.
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let level = if record.target().starts_with("rustls") {
            level_of(record.target(), &record.args().to_string(), record.level())
        } else {
            record.level()
        };
        let record = log::Record::builder()
            .args(*record.args())
            .level(level)
            .target(record.target())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line())
            .build();
        // Fails only without a subscriber, when there is nowhere to log to.
        let _ = tracing_log::format_trace(&record);
    }

    fn flush(&self) {}
}

/// Installs the subscriber (filter from `RUST_LOG`, default `info`) and the
/// `log` bridge. Called once, first thing, by the binary.
pub fn init(format: LogFormat) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The kube client logs an ERROR per failed request: against an
    // unreachable API server, one per watch per retry. The caches log one
    // line per attempt instead (watch::health). RUST_LOG naming
    // kube_client keeps them.
    let named = std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube_client"));
    if !named && let Ok(directive) = "kube_client::client::builder=off".parse() {
        filter = filter.add_directive(directive);
    }
    let colour = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    // Installed before any library logs, so a second call can only fail,
    // which changes nothing.
    let _ = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(builder.finish()),
        LogFormat::Json => tracing::subscriber::set_global_default(builder.json().finish()),
    };
    if log::set_boxed_logger(Box::new(Bridge)).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}

/// An error and every cause under it (`client error (Connect): tcp connect
/// error: Connection refused (os error 111)`), where kube's own message stops
/// at the first.
pub fn causes(error: &dyn std::error::Error) -> String {
    let mut said = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !said.contains(&text) {
            said = format!("{said}: {text}");
        }
        source = cause.source();
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(!use_colour(false, None));
        assert!(!use_colour(true, Some("1".into())));
        assert!(
            use_colour(true, Some("".into())),
            "an empty NO_COLOR is unset"
        );
    }

    #[test]
    fn rustls_sni_warnings_are_debug_and_nothing_else_changes() {
        let sni = "Illegal SNI extension: ignoring IP address presented as hostname ([49, 48])";
        assert_eq!(
            level_of("rustls::msgs::handshake", sni, log::Level::Warn),
            log::Level::Debug
        );
        assert_eq!(
            level_of(
                "rustls::msgs::handshake",
                "Illegal SNI hostname received \"a\"",
                log::Level::Warn
            ),
            log::Level::Debug
        );
        assert_eq!(
            level_of("rustls::conn", "Sending fatal alert", log::Level::Warn),
            log::Level::Warn
        );
        assert_eq!(level_of("hyper", sni, log::Level::Warn), log::Level::Warn);
        assert_eq!(
            level_of("rustls::msgs::handshake", sni, log::Level::Trace),
            log::Level::Trace,
            "never raised"
        );
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_bridge_logs_rustls_sni_warnings_at_debug() {
        use log::Log;
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            Bridge.log(
                &log::Record::builder()
                    .args(format_args!(
                        "Illegal SNI extension: ignoring IP address presented as hostname"
                    ))
                    .level(log::Level::Warn)
                    .target("rustls::msgs::handshake")
                    .build(),
            );
            Bridge.log(
                &log::Record::builder()
                    .args(format_args!("another warning"))
                    .level(log::Level::Warn)
                    .target("rustls::conn")
                    .build(),
            );
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].contains("DEBUG") && lines[0].contains("Illegal SNI"),
            "{text}"
        );
        assert!(
            lines[1].contains("WARN") && lines[1].contains("another warning"),
            "{text}"
        );
    }
}
