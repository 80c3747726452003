// tests/core/varlen_test.cpp — placeholder
