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
        let path =
            clap_complete::generate_to(shell, &mut Cli::command(), "iosched-trace", &completions)?;
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
