// src/scenario/expand.cpp — placeholder
