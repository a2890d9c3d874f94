//! The exit status and the error prefix every subcommand uses, as `grep`,
//! `diff` and `kubectl diff` do: 0 yes, 1 no, 2 trouble. clap's own usage
//! errors already exit 2 with `error: `, so Tandem's agree with them.

/// Done: rendered, checked and ready, written, served until stopped.
pub const DONE: u8 = 0;
/// The answer is no: `render` denied an object as the webhook would;
/// `check` found the cluster cannot deploy InferenceServices.
pub const NO: u8 = 1;
/// Tandem could not do what was asked: a flag, a file or the cluster could
/// not be used (unreadable, unparseable, unreachable, not writable), the
/// reconcilers did not settle, or `serve` could not start or keep serving.
pub const TROUBLE: u8 = 2;

/// What every error line on stderr starts with.
pub const ERROR_PREFIX: &str = "error: ";

/// `tandem --help`'s last paragraph: the convention, once for all.
pub const HELP: &str = "\
Exit status, the same for every subcommand: 0 done; 1 the answer is no (render denied an
object, check found the cluster cannot deploy InferenceServices); 2 trouble (a flag, a file
or the cluster could not be used, or serve could not start or keep serving). Errors go to
stderr as `error: ...`; render's denials as `Kind namespace/name: field.path: reason`;
warnings as `Warning: ...`, as kubectl prints the webhook's.";
