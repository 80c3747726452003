// reference/simple_gla.cpp — placeholder
