// A call whose input violates the tool's input schema fails in the guest with a
// catchable `invalid_input` error before anything is sent: the message names the place, what the
// schema expects and the given JSON type, never the given value. A valid call still runs.
const out = [];
for (const input of [{ ms: "sk-SECRET" }, {}, { ms: -5 }]) {
  try {
    await tools.demo_sleep(input);
    out.push("ran");
  } catch (e) {
    out.push([e.code, e.message.includes("SECRET") ? "leaked" : e.message]);
  }
}
out.push((await tools.demo_sleep({ ms: 1 })).slept);
return out;
