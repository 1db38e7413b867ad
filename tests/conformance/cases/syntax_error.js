// A syntax error fails the run before anything runs.
const x = ;
