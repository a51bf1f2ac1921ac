//! Counter-based random numbers (to be written).
