"""The frame ring's benchmark (bench_ring): its cost per frame for the producer and per reader."""
