//! The interactive screen's loop: terminal setup and restore, keys -> actions, intervals from
//! the collector's channel -> the app, and a redraw after each change.
//!
//! The terminal is restored on quit, on error (a guard's drop) and on panic (ratatui's
//! panic hook, installed by `try_init`, restores before the message is printed).

use std::time::Duration;

use anyhow::Context;
use ratatui::crossterm::event::{self, Event as TermEvent};

use super::{
    app::{App, action_for},
    collector::{Collector, Message},
    ui,
};

/// How long to wait for a key before looking at the channel again.
const POLL: Duration = Duration::from_millis(50);

/// Restores the terminal when dropped, whatever ends the loop.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

pub fn run(collector: &Collector, app: &mut App) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let _restore = Restore;
    let mut dirty = true;
    while !app.quit && !super::stop::requested() {
        if dirty {
            terminal
                .draw(|frame| ui::render(app, frame))
                .context("drawing")?;
            dirty = false;
        }
        if event::poll(POLL).context("reading the terminal")? {
            match event::read().context("reading the terminal")? {
                TermEvent::Key(key) => {
                    if let Some(action) = action_for(key, app.editing_filter) {
                        app.update(action);
                        dirty = true;
                    }
                }
                TermEvent::Resize(..) => dirty = true,
                _ => {}
            }
        }
        loop {
            match collector.rx.try_recv() {
                Ok(Message::Snapshot(s)) => {
                    app.on_snapshot(*s);
                    dirty = true;
                }
                Ok(Message::Failed(e)) => {
                    app.error = Some(e);
                    dirty = true;
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    if app.error.is_none() {
                        app.error = Some("the collector stopped".into());
                        dirty = true;
                    }
                    break;
                }
            }
        }
    }
    Ok(())
}
