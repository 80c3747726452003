// tests/core/dtype_test.cpp — placeholder
