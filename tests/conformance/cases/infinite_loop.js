// @requires interrupt
// @config {"timeoutMs": 300}
// V18: an infinite loop times out and cannot block the gateway.
text("spinning");
while (true) {}
