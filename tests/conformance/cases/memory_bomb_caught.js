// @requires memoryLimit
// @config {"memoryLimitBytes": 16777216}
// Out of memory is catchable inside the guest, and the VM stays usable once memory is released.
let a = [];
let caught = "";
try {
  for (;;) a.push("x".repeat(65536) + a.length);
} catch (e) {
  caught = e instanceof Error ? "an Error" : typeof e; // the engine's wording is not the contract
}
a = null;
return { caught, after: [1, 2, 3].map((x) => x * 2) };
