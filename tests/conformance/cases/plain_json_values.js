// Plain data crosses the bridge as JSON.stringify writes it, whatever shortcut an engine takes
// (the wasm engine serializes plain data natively): every escape class of strings, number
// formatting at its edges, key order, null-prototype objects, nesting. Values that are not plain
// data (getters, holes, toJSON on the prototype chain, a changed prototype chain) take the
// prelude's own path on every engine: a getter runs as often everywhere (the counts are returned).
const strings = [
  "", "plain", 'quote " and backslash \\', "\b\f\n\r\t", "\u0000\u0001\u001f\u007f", "é and 漢字",
  "\uD83D\uDE00 pair", "lone \uD800 high", "lone \uDC00 low", "end \uD83D", "\u2028\u2029", "</script>",
];
const numbers = [
  0, -0, 1, -1, 7, -9, 10, -10, 123456789, -987654321, 2 ** 31 - 1, -(2 ** 31), 2 ** 31, -(2 ** 31) - 1, 2 ** 53, 1e21, 1e-7, 0.1, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, -1.5e-10,
];
const nullProto = Object.create(null);
nullProto.z = 1;
nullProto.a = [true, false, null];
const values = {
  strings,
  numbers,
  keys: { b: 1, 2: "two", a: 3, 1: "one", 'k"ey': 4, "new\nline": 5, "": 6, "\uD800": 7 },
  nested: [[[], {}], { x: [{ y: [1, [2, [3]]] }] }],
  nullProto,
};
const echoed = await tools.demo_echo(values);

let reads = 0;
const withGetter = { a: 1, get b() { reads += 1; return reads; } };
const echoedGetter = await tools.demo_echo({ withGetter });
const getterReads = reads;

const holes = [1, , 3];
const accessorElement = [1, 2];
Object.defineProperty(accessorElement, 1, { get: () => "got", enumerable: true });
const notPlain = await tools.demo_echo({ holes, accessorElement, fn: () => 1, undef: undefined, big: 10n });

Array.prototype.toJSON = function () { return "array toJSON"; };
const arrayToJson = await tools.demo_echo({ list: [1, 2] });
delete Array.prototype.toJSON;

const hidden = Object.create(null);
hidden.toJSON = function () { return "from the prototype chain"; };
Object.setPrototypeOf(Array.prototype, hidden);
const changedChain = await tools.demo_echo({ list: [1, 2] });
Object.setPrototypeOf(Array.prototype, Object.prototype);

return { echoed, echoedGetter, getterReads, notPlain, arrayToJson, changedChain };
