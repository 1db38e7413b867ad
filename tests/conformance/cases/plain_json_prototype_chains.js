// Prototype chains, whatever shortcut an engine's serializer takes: JSON.stringify writes an
// object's own data and looks for `toJSON` through its whole chain, so a chain without one changes
// nothing, a `toJSON` several links up is called, a Proxy anywhere on the chain is consulted (its
// traps run as often on every engine; the counts are returned), and an exotic object (a Date)
// under Object.prototype is written as JSON.stringify writes it.
let traps = 0;
const counting = new Proxy({}, {
  get(target, key, receiver) {
    traps += 1;
    return Reflect.get(target, key, receiver);
  },
  getPrototypeOf(target) {
    traps += 1;
    return Reflect.getPrototypeOf(target);
  },
});
const base = { inherited: "not written" };
const child = Object.create(base);
child.own = 1;
const deep = Object.create(Object.create(Object.create({ toJSON() { return "deep toJSON"; } })));
deep.x = 1;
const viaProxy = Object.create(counting);
viaProxy.y = 2;
const bareArray = Object.setPrototypeOf([1, [2]], null);
const arrayOnObject = Object.setPrototypeOf([3], base);
let long = {};
for (let i = 0; i < 40; i++) long = Object.create(long);
long.z = 3;
const dateUnderObject = Object.setPrototypeOf(new Date(0), Object.prototype);
const values = { child, deep, viaProxy, bareArray, arrayOnObject, long, dateUnderObject };
const inGuest = JSON.stringify(values);
const guestTraps = traps;
// Each value in a call of its own, so that one value that is not plain data does not send the
// others down the prelude's path as well.
const echoed = {};
for (const key of Object.keys(values)) echoed[key] = (await tools.demo_echo({ value: values[key] })).value;
return { sameAsJsonStringify: JSON.stringify(echoed) === inGuest, echoed, guestTraps, traps };
