// An accessor `toJSON` on Object.prototype: whatever shortcut an engine takes to serialize plain
// data, it may not call the accessor (the prelude's own path reads it, the same number of times on
// every engine; the count is returned), and removing it afterwards leaves serialization intact.
let toJsonReads = 0;
Object.defineProperty(Object.prototype, "toJSON", {
  get() {
    toJsonReads += 1;
    return undefined;
  },
  configurable: true,
});
const accessorToJson = await tools.demo_echo({ a: { b: [1] } });
delete Object.prototype.toJSON;
return { toJsonReads, accessorToJson };
