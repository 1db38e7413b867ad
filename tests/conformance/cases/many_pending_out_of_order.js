// @config {"maxPendingToolCalls": 100}
// E13, §12: 100 nested calls in flight at once, settled in an order unlike the one they were made
// in (the sleeps made first end last, instant echoes and failures in between), then 300 sequential
// calls. Engines that settle requests natively keep a table of pending promises by request id: the
// fan-out grows it past its first sizes, the sequence leaves settled entries behind to be squeezed
// out. Every outcome must reach the promise of its own call.
const expected = [];
const calls = [];
for (let i = 0; i < 100; i++) {
  if (i % 7 === 3) {
    calls.push(tools.demo_fail({ message: "no " + i }).then(() => "not reached", (e) => e.code + " " + e.message));
    expected.push("nested_tool_failed plugin:demo:demo_fail: no " + i);
  } else if (i % 2 === 0) {
    calls.push(tools.demo_sleep({ ms: 100 - i }).then((r) => r.slept));
    expected.push(100 - i);
  } else {
    calls.push(tools.demo_echo({ i }).then((r) => r.i));
    expected.push(i);
  }
}
const got = await Promise.all(calls);
const misplaced = got.filter((v, i) => v !== expected[i]).length;
let sum = 0;
for (let i = 0; i < 300; i++) sum += (await tools.demo_echo({ i })).i;
return { misplaced, first: got.slice(0, 8), last: got.slice(92), sum };
