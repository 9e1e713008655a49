//! Writes the man pages (one per subcommand, and `iosched-trace.1`) and the bash, zsh and
//! fish completions, generated from the clap definitions in `iosched_trace::cli`, to
//! `OUT_DIR/man` and `OUT_DIR/completions`. `cargo xtask dist` runs it:
//!
//!     cargo run --release -p iosched-trace --example gen_docs -- OUT_DIR

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;
use iosched_trace::cli::Cli;

fn main() -> std::io::Result<()> {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: gen_docs OUT_DIR");
        std::process::exit(2);
    };
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    clap_mangen::generate_to(Cli::command(), &man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(
            shell,
            &mut without_hidden(&Cli::command()),
            "iosched-trace",
            &completions,
        )?;
        if shell == Shell::Bash {
            fix_bash(&path)?;
        }
        println!("{}", path.display());
    }
    let mut pages: Vec<_> = std::fs::read_dir(&man)?
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    pages.sort();
    for page in pages {
        println!("{}", page.display());
    }
    Ok(())
}

/// `cmd` as the completions should offer it: without its hidden subcommands and arguments
/// (the benchmarks' `synth` and `model-bench`, test-only flags), which clap_complete 4.6
/// lists all the same in every shell's script. clap cannot remove a subcommand, so the tree
/// is built again from what is visible (its names leaked: clap takes `&'static str` without
/// its `string` feature, and this program ends right after).
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let mut out = clap::Command::new(leak(cmd.get_name()))
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(without_hidden),
        );
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        out = out.version(leak(version));
    }
    out
}

/// clap_complete 4.6's bash script for a binary whose name has a `-` (clap issue #6421):
/// the loop over the words names a subcommand's state `iosched__trace__subcmd__record`, but
/// the dispatch below it matches `iosched__subcmd__trace__subcmd__record` (the name's own
/// `-` escaped as a subcommand separator), so nothing after the first word completes. The
/// dispatch's spelling is brought back to the loop's; the check fails loudly once a release
/// fixes it (then drop this).
fn fix_bash(path: &std::path::Path) -> std::io::Result<()> {
    const WRONG: &str = "iosched__subcmd__trace";
    let text = std::fs::read_to_string(path)?;
    if !text.contains(WRONG) {
        return Err(std::io::Error::other(format!(
            "{}: no `{WRONG}`: clap issue #6421 may be fixed, remove gen_docs's fix_bash",
            path.display()
        )));
    }
    std::fs::write(path, text.replace(WRONG, "iosched__trace"))
}
