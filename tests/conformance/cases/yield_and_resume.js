// @steps
// V21, E14: yield_control suspends with reason "yield"; wait resumes; output after the restore is returned.
text("before yield");
const state = { counter: 1 };
const r = await yield_control("checkpoint");
state.counter += 1;
text("after yield");
await yield_control();
state.counter += 1;
return { r: r === undefined ? "undefined" : r, counter: state.counter };
