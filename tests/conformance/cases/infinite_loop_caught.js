// @requires interrupt
// @config {"timeoutMs": 300}
// V18: the interrupt is uncatchable.
try {
  while (true) {}
} catch (e) {
  return "caught " + e;
}
