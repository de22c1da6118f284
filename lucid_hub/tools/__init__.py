"""Tools around the hub, installed with it but not part of it: benchmarks (`bench/`), the
demonstration (`demo`, `demo_patches`) and the helpers that run hubs and brokers on loopback
for them and for the tests (`hubproc`, `loopback`)."""
