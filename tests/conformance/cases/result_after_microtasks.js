// The cell's value is read one job after its promise settles, as `then` (or a host's `await`)
// would read it: the jobs the cell queued before it returned run first, the jobs those queue in
// turn run after. Here the promise settles after a nested call, so the read is queued when the cell
// returns, behind the one job already queued. Reading the value at once gives v 1; reading it only
// after every job, v 3.
const late = { v: 1 };
await tools.demo_echo({ i: 1 });
Promise.resolve()
  .then(() => { late.v = 2; })
  .then(() => { late.v = 3; });
return late;
