// kernels/simple_gla/simple_gla_cpu.cpp — placeholder
