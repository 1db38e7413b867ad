// A cell that replaces `Promise.prototype.constructor` and `Promise[Symbol.species]` with getters
// runs no code of its own while its value is delivered: the engine reads the value as `await`
// would, not through a `then` that looks them up. (The getters count their calls; the value is
// serialized after the delivery, so `during` shows what ran in it.)
let calls = 0;
Object.defineProperty(Promise.prototype, "constructor", {
  get() { calls++; return Promise; },
  configurable: true,
});
Object.defineProperty(Promise, Symbol.species, {
  get() { calls++; return Promise; },
  configurable: true,
});
return { get during() { return calls; } };
