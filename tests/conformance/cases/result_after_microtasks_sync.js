// As result_after_microtasks, for a cell that never awaits: its promise has settled by the time
// the engine attaches the read, which is then queued at once, behind the one job the cell queued.
const o = { v: 1 };
Promise.resolve()
  .then(() => { o.v = 2; })
  .then(() => { o.v = 3; });
return o;
