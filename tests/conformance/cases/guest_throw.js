// An uncaught guest exception fails the run without a code; the message carries the name and a stack line.
function inner() {
  throw new TypeError("the cell gave up");
}
inner();
