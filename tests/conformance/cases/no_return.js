// A cell without `return` completes with null.
const x = 41 + 1;
