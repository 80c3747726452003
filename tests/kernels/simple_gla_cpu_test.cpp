// tests/kernels/simple_gla_cpu_test.cpp — placeholder
