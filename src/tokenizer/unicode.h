#pragma once
// UTF-8 helpers and GPT-2's byte-to-unicode alphabet, shared by the tokenizers.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tf::unicode {

// Length in bytes of the UTF-8 character starting at s[i] (1..4); an invalid lead or truncated
// sequence counts as 1 byte.
size_t char_length(std::string_view s, size_t i);

// Appends the UTF-8 encoding of code point cp.
void append_utf8(std::string& out, uint32_t cp);

// Decodes the character at s[i] (advancing i); invalid bytes decode as U+FFFD, one byte each.
uint32_t next_code_point(std::string_view s, size_t& i);

// True if s ends in the middle of a UTF-8 character that more bytes could still complete.
bool ends_with_incomplete_utf8(std::string_view s);

// Replaces every invalid UTF-8 sequence with U+FFFD.
std::string sanitize_utf8(std::string_view s);

// GPT-2's reversible map of the 256 byte values to printable code points (byte_encoder in
// OpenAI's encoder.py), as UTF-8 strings, and its inverse.
const std::array<std::string, 256>& bytes_to_unicode();
// The byte a byte-level symbol stands for, or -1 if cp is not in the alphabet.
int unicode_to_byte(uint32_t cp);

}  // namespace tf::unicode
