//! The output going up the tree besides replies: the programs' stdio lines (the format the
//! nodes merge them in, one stream byte and the line) and events, and the credit a receiver
//! (a parent, or the front-end) hands back for the output it took, so output never holds up
//! commands and replies.

pub use crate::coalesce::{IDLE, STDERR, STDOUT, StdioLine, idle_stream};
pub use crate::flow::{GRANT_STEP, Grant, WINDOW, cost, credit, is_bulk, parse_credit};
