// tests/reference/simple_gla_ref_test.cpp — placeholder
