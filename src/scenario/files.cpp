// src/scenario/files.cpp — placeholder
