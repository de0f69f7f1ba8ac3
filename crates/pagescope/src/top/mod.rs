//! `pagescope top`: the live view's state and drawing. The figures come
//! from `serve`'s collector ([`crate::serve::collect`]); the loop that
//! refreshes them and reads keys is [`crate::commands`]' `top`.
//!
//! The modules, each using only those listed before it: `state` (the
//! rows, their order and filter, the selection, the working-set history),
//! `detail` (one process's VMAs), `draw` (the screen).

pub mod detail;
pub mod draw;
pub mod state;
