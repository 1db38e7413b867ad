// A tool result is an ordinary object, and the language's promise rules apply when a call's
// promise is settled with it, on every engine (an engine that settles requests natively must take
// the same steps as a promise's own resolve function): a callable `then` reached from the result
// is followed in a job, with the result as `this`; a `then` getter that throws rejects the call
// with what it threw; a `then` that is no function leaves the result as it is.
const seen = [];
Object.defineProperty(Object.prototype, "then", {
  value: function (resolve) {
    delete Object.prototype.then;
    seen.push(JSON.stringify(this));
    resolve("followed");
  },
  configurable: true,
  writable: true,
});
const followed = await tools.demo_echo({ i: 1 });

Object.defineProperty(Object.prototype, "then", {
  get() {
    delete Object.prototype.then;
    throw new RangeError("then getter threw");
  },
  configurable: true,
});
let rejected;
try {
  await tools.demo_echo({ i: 2 });
  rejected = "not rejected";
} catch (e) {
  rejected = e.name + ": " + e.message;
}

const plain = await tools.demo_echo({ then: 5 });
return { followed, seen, rejected, plain, thenLeft: "then" in Object.prototype };
