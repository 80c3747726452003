// kernels/simple_gla/simple_gla_contract.cpp — placeholder
