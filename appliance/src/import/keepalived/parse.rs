//! keepalived.conf's grammar, read the way keepalived's own parser (`lib/parser.c`) reads it:
//! a tree of statements, each a line of words, some followed by a `{ ... }` block. `#` and `!`
//! start a comment anywhere outside quotes; `"` and `'` quote (the quotes are removed, the
//! spaces inside kept); `{` and `}` are tokens of their own wherever they stand outside
//! quotes, and a block's `{` may stand on the line after its keyword; `$NAME=value` lines
//! define parameters that `$NAME` and `${NAME}` expand to, again inside what they expand to,
//! as keepalived's `replace_param` does. An `include PATTERN` line (`includer`, `includem`,
//! ... alike) is replaced by the lines of the files it names, wherever it stands, as
//! keepalived's reader does; the files come through [`Includes`], so parsing stays pure.
//! Conditional lines (`@id ...`) cannot be evaluated without keepalived's config id: they are
//! skipped and reported.
//!
//! The parser is total: any input gives a tree or an error naming the line, never a panic.
//! It builds the tree without recursion and refuses nesting deeper than keepalived's own
//! deepest block needs, so hostile input cannot exhaust the stack. Its work is bounded by
//! its input: a line expands to at most keepalived's own line limit ([`MAX_LINE`]), the
//! whole text to [`MAX_EXPANDED`] bytes and [`MAX_WORDS`] words, each refused with its
//! line rather than allocated.

use std::collections::HashMap;

/// Deepest block nesting accepted (keepalived's deepest, `url` inside a checker inside a
/// `real_server` inside a `virtual_server`, is 4).
pub const MAX_DEPTH: usize = 16;

/// keepalived's line buffer (`MAXBUF` in `lib/parser.h`): a line whose `$` expansions would
/// grow past it is left unexpanded by keepalived, with an error in its log.
pub const MAX_LINE: usize = 1024;

/// The most text all lines may expand to together (the largest file read is as large).
pub const MAX_EXPANDED: usize = 32 << 20;

/// The most words (keywords and arguments) a file may hold: what bounds the tree's memory.
pub const MAX_WORDS: usize = 4_000_000;

/// Expansions on one line before the parser calls it a loop (`$A=$B`, `$B=$A`).
const MAX_EXPANSIONS: usize = 256;

/// One statement: its words (keyword first) and, when a `{` followed, its block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub words: Vec<String>,
    /// 1-based line of the keyword.
    pub line: usize,
    /// Line of the block's closing `}` (the keyword's line when there is no block).
    pub end_line: usize,
    pub block: Option<Vec<Node>>,
}

impl Node {
    /// The keyword (first word).
    pub fn keyword(&self) -> &str {
        self.words.first().map_or("", String::as_str)
    }

    /// The words after the keyword.
    pub fn args(&self) -> &[String] {
        self.words.get(1..).unwrap_or(&[])
    }

    /// The block's statements (none without a block).
    pub fn children(&self) -> &[Node] {
        self.block.as_deref().unwrap_or(&[])
    }
}

/// A file that is not keepalived.conf text, or whose braces or quotes do not balance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error(
        "line {line}: byte 0x{byte:02x} is not text (keepalived.conf is a text file: is this the right file?)"
    )]
    NotText { line: usize, byte: u8 },
    #[error("line {line}: the quoted string has no closing {quote}")]
    UnterminatedQuote { line: usize, quote: char },
    #[error("line {line}: '}}' closes no block (one '}}' too many, or a '{{' missing above)")]
    ExtraClose { line: usize },
    #[error(
        "line {line}: the block of {keyword:?} opened here is never closed (a '}}' is missing)"
    )]
    Unclosed { line: usize, keyword: String },
    #[error("line {line}: '{{' has no keyword before it")]
    BareOpen { line: usize },
    #[error("line {line}: blocks nested deeper than {MAX_DEPTH} (a '}}' is missing above?)")]
    TooDeep { line: usize },
    #[error(
        "line {line}: expanding its $definitions makes it longer than keepalived's {MAX_LINE}-byte \
         line limit (keepalived leaves such a line unexpanded and logs an error): shorten the \
         definition or the line"
    )]
    LineTooLong { line: usize },
    #[error(
        "line {line}: its $definitions expand into each other without end (more than \
         {MAX_EXPANSIONS} expansions): a definition refers to itself"
    )]
    ExpansionLoop { line: usize },
    #[error(
        "line {line}: the file expands to more than {} MiB of text with its $definitions: too \
         large to import",
        MAX_EXPANDED >> 20
    )]
    TooLarge { line: usize },
    #[error("line {line}: more than {MAX_WORDS} words: too large to import")]
    TooManyWords { line: usize },
    #[error("line {line}: {why}")]
    Include { line: usize, why: String },
    /// An error in an included file, at its own line.
    #[error("{file}: {error}")]
    In {
        file: String,
        error: Box<SyntaxError>,
    },
}

impl SyntaxError {
    /// The (global) line the error is at.
    fn line(&self) -> usize {
        use SyntaxError::*;
        match self {
            NotText { line, .. }
            | UnterminatedQuote { line, .. }
            | ExtraClose { line }
            | Unclosed { line, .. }
            | BareOpen { line }
            | TooDeep { line }
            | LineTooLong { line }
            | ExpansionLoop { line }
            | TooLarge { line }
            | TooManyWords { line }
            | Include { line, .. } => *line,
            In { error, .. } => error.line(),
        }
    }

    /// The error at its line within its own file.
    fn local(mut self) -> SyntaxError {
        use SyntaxError::*;
        match &mut self {
            NotText { line, .. }
            | UnterminatedQuote { line, .. }
            | ExtraClose { line }
            | Unclosed { line, .. }
            | BareOpen { line }
            | TooDeep { line }
            | LineTooLong { line }
            | ExpansionLoop { line }
            | TooLarge { line }
            | TooManyWords { line }
            | Include { line, .. } => *line = super::split_line(*line).1,
            In { .. } => {}
        }
        self
    }
}

/// Where `include` lines find their files.
pub trait Includes {
    /// The files `pattern` names, included at `line` of file `from`: each with its index
    /// (its lines are numbered above [`super::FILE_SHIFT`] by it) and text, and notes on
    /// what keepalived would pass over too (a pattern matching nothing); or why the import
    /// cannot follow it.
    fn include(&mut self, pattern: &str, from: usize) -> Result<Resolved, String>;

    /// The name of every file so far by index, `main` being the main file's.
    fn names(&self, main: &str) -> Vec<String>;
}

/// What an `include` line resolved to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// (file index, text), in keepalived's order (each pattern's matches sorted).
    pub files: Vec<(usize, String)>,
    pub notes: Vec<String>,
}

/// Bytes alone, without a file: an `include` cannot be followed.
pub struct NoIncludes;

impl Includes for NoIncludes {
    fn include(&mut self, pattern: &str, _from: usize) -> Result<Resolved, String> {
        Err(format!(
            "include {pattern}: included files are followed only when importing a file (sluice \
             import keepalived FILE)"
        ))
    }

    fn names(&self, main: &str) -> Vec<String> {
        vec![main.to_string()]
    }
}

/// The pattern of an `include` line: what follows the keyword up to a comment, as keepalived
/// takes it (braces are the glob's, not blocks).
fn include_pattern(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let (word, rest) = t.split_once([' ', '\t'])?;
    if !INCLUDES.contains(&word) {
        return None;
    }
    let rest = rest.split(['#', '!']).next().unwrap_or("").trim();
    (!rest.is_empty()).then_some(rest)
}

/// keepalived's include keywords (lib/parser.c `is_include`).
const INCLUDES: [&str; 6] = [
    "include", "includer", "includem", "includew", "includeb", "includea",
];

/// What parsing gives besides the tree.
#[derive(Debug, Default)]
pub struct Parsed {
    pub tree: Vec<Node>,
    /// Conditional lines passed over.
    pub skipped: Vec<Skipped>,
    /// What the includes passed over.
    pub notes: Vec<Skipped>,
}

/// A line the parser skipped on purpose, with why (conditional configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub line: usize,
    pub text: String,
}

/// What one line holds once comments are gone: words and braces in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Open,
    Close,
}

/// Parses a whole file into its top-level statements (an `include` is an error).
pub fn parse(bytes: &[u8]) -> Result<(Vec<Node>, Vec<Skipped>), SyntaxError> {
    let p = parse_with(as_text(bytes)?, &mut NoIncludes)?;
    Ok((p.tree, p.skipped))
}

/// Parses text that [`as_text`] accepted, following its includes through `includes`.
pub fn parse_with(text: &str, includes: &mut dyn Includes) -> Result<Parsed, SyntaxError> {
    let mut r = Reader {
        builder: Builder::default(),
        defs: HashMap::new(),
        parsed: Parsed::default(),
        expanded: 0,
        includes,
    };
    let out = r.file(text, 0).and_then(|()| r.builder.finish());
    match out {
        Ok(tree) => {
            r.parsed.tree = tree;
            Ok(r.parsed)
        }
        Err(e) => match super::split_line(e.line()).0 {
            0 => Err(e),
            k => Err(SyntaxError::In {
                file: r.includes.names("").get(k).cloned().unwrap_or_default(),
                error: Box::new(e.local()),
            }),
        },
    }
}

/// The reader of one import: the tree being built and what the lines so far defined.
struct Reader<'a> {
    builder: Builder,
    defs: HashMap<String, String>,
    parsed: Parsed,
    /// Bytes all lines expanded to so far.
    expanded: usize,
    includes: &'a mut dyn Includes,
}

impl Reader<'_> {
    /// Reads file `index`'s text into the tree.
    fn file(&mut self, text: &str, index: usize) -> Result<(), SyntaxError> {
        for (i, raw) in text.split('\n').enumerate() {
            let line = (index << super::FILE_SHIFT) | (i + 1);
            self.line(raw, line, index)?;
        }
        Ok(())
    }

    fn line(&mut self, raw: &str, line: usize, file: usize) -> Result<(), SyntaxError> {
        let trimmed = raw.trim_start();
        if let Some(def) = trimmed.strip_prefix('$')
            && let Some((name, value)) = def.split_once('=')
            && is_param_name(name.trim())
        {
            self.defs
                .insert(name.trim().to_string(), value.trim().to_string());
            return Ok(());
        }
        if trimmed.starts_with('@') {
            self.parsed.skipped.push(Skipped {
                line,
                text: trimmed.trim_end().to_string(),
            });
            return Ok(());
        }
        let expanded = expand(raw, &self.defs, line)?;
        self.expanded += expanded.len() + 1;
        if self.expanded > MAX_EXPANDED {
            return Err(SyntaxError::TooLarge { line });
        }
        if let Some(pattern) = include_pattern(&expanded) {
            return self.include(pattern, line, file);
        }
        let tokens = tokens(&expanded, line)?;
        for token in tokens {
            self.builder.push(token, line)?;
        }
        self.builder.end_line();
        Ok(())
    }

    /// An `include` line: the lines of the files it names, in their place.
    fn include(&mut self, pattern: &str, line: usize, file: usize) -> Result<(), SyntaxError> {
        let resolved = self
            .includes
            .include(pattern, file)
            .map_err(|why| SyntaxError::Include { line, why })?;
        for text in resolved.notes {
            self.parsed.notes.push(Skipped { line, text });
        }
        for (index, text) in resolved.files {
            self.file(&text, index)?;
        }
        Ok(())
    }
}

/// The file as UTF-8 text without control bytes other than tab, CR, LF and form feed.
pub fn as_text(bytes: &[u8]) -> Result<&str, SyntaxError> {
    let line_of = |at: usize| 1 + bytes[..at].iter().filter(|b| **b == b'\n').count();
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        SyntaxError::NotText {
            line: line_of(at),
            byte: bytes[at],
        }
    })?;
    if let Some(at) = bytes.iter().position(|b| control_byte(*b)) {
        return Err(SyntaxError::NotText {
            line: line_of(at),
            byte: bytes[at],
        });
    }
    Ok(text)
}

/// A byte no text file holds: control characters other than tab, CR, LF and form feed.
pub fn control_byte(b: u8) -> bool {
    b < 0x20 && !matches!(b, b'\t' | b'\r' | b'\n' | 0x0c) || b == 0x7f
}

fn is_param_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Replaces `${NAME}` and `$NAME` by the definitions seen so far, and again inside what
/// they expanded to (others stay as written): keepalived's `replace_param`, which matches an
/// unbraced name only when a space, tab, `,`, `)` or the line's end follows it.
fn expand<'a>(
    line: &'a str,
    defs: &HashMap<String, String>,
    lineno: usize,
) -> Result<std::borrow::Cow<'a, str>, SyntaxError> {
    if defs.is_empty() || !line.contains('$') {
        return Ok(std::borrow::Cow::Borrowed(line));
    }
    let mut buf = line.to_string();
    let mut pos = 0;
    let mut done = 0;
    while let Some(off) = buf[pos..].find('$') {
        let at = pos + off;
        let Some((used, value)) = definition_at(&buf[at + 1..], defs) else {
            pos = at + 1;
            continue;
        };
        done += 1;
        if done > MAX_EXPANSIONS {
            return Err(SyntaxError::ExpansionLoop { line: lineno });
        }
        if buf.len() - (used + 1) + value.len() > MAX_LINE.max(line.len()) {
            return Err(SyntaxError::LineTooLong { line: lineno });
        }
        buf.replace_range(at..at + 1 + used, value);
        // keepalived scans on from where the name stood: the value is expanded in turn.
        pos = at;
    }
    Ok(std::borrow::Cow::Owned(buf))
}

/// The definition named at the start of `after` (what follows a `$`): the bytes its name
/// takes (with braces) and its value.
fn definition_at<'d>(after: &str, defs: &'d HashMap<String, String>) -> Option<(usize, &'d str)> {
    let (name, used) = match after.strip_prefix('{') {
        Some(b) => {
            let end = b.find('}')?;
            (&b[..end], end + 2)
        }
        None => {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let next = after[end..].chars().next();
            if !matches!(next, None | Some(' ' | '\t' | ',' | ')' | '\r')) {
                return None;
            }
            (&after[..end], end)
        }
    };
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    defs.get(name).map(|v| (used, v.as_str()))
}

/// Splits one line into words and braces, dropping its comment.
fn tokens(line: &str, lineno: usize) -> Result<Vec<Token>, SyntaxError> {
    let mut out = Vec::new();
    let mut word = String::new();
    // A word has started even when it is empty so far (`""` is an empty word).
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '#' | '!' => break,
            '{' | '}' => {
                if in_word {
                    out.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
                out.push(if c == '{' { Token::Open } else { Token::Close });
            }
            '"' | '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        None => {
                            return Err(SyntaxError::UnterminatedQuote {
                                line: lineno,
                                quote: c,
                            });
                        }
                        Some(q) if q == c => break,
                        Some('\\') => match chars.next() {
                            Some(e) => word.push(e),
                            None => word.push('\\'),
                        },
                        Some(o) => word.push(o),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(Token::Word(std::mem::take(&mut word)));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(Token::Word(word));
    }
    Ok(out)
}

/// Builds the tree from tokens line by line, with an explicit stack of open blocks.
#[derive(Default)]
struct Builder {
    /// Finished statements of each open level; `[0]` is the top level.
    levels: Vec<Vec<Node>>,
    /// The statement being read on the current line.
    current: Option<Node>,
    /// The last statement ended at a line end without a block: a `{` first on the next
    /// line opens its block.
    last_may_open: bool,
    /// Words read so far (bounded by [`MAX_WORDS`]).
    words: usize,
}

impl Builder {
    fn level(&mut self) -> &mut Vec<Node> {
        if self.levels.is_empty() {
            self.levels.push(Vec::new());
        }
        let top = self.levels.len() - 1;
        &mut self.levels[top]
    }

    fn push(&mut self, token: Token, line: usize) -> Result<(), SyntaxError> {
        match token {
            Token::Word(w) => {
                self.words += 1;
                if self.words > MAX_WORDS {
                    return Err(SyntaxError::TooManyWords { line });
                }
                self.last_may_open = false;
                let node = self.current.get_or_insert_with(|| Node {
                    words: Vec::new(),
                    line,
                    end_line: line,
                    block: None,
                });
                node.words.push(w);
            }
            Token::Open => {
                let node = match self.current.take() {
                    Some(n) => n,
                    None if self.last_may_open => match self.level().pop() {
                        Some(n) => n,
                        None => return Err(SyntaxError::BareOpen { line }),
                    },
                    None => return Err(SyntaxError::BareOpen { line }),
                };
                self.last_may_open = false;
                if self.levels.len() > MAX_DEPTH {
                    return Err(SyntaxError::TooDeep { line });
                }
                // The opener waits, block-less, as the last statement of its level.
                self.level().push(node);
                self.levels.push(Vec::new());
            }
            Token::Close => {
                self.end_statement();
                self.last_may_open = false;
                if self.levels.len() < 2 {
                    return Err(SyntaxError::ExtraClose { line });
                }
                let children = self.levels.pop().unwrap_or_default();
                let Some(opener) = self.level().last_mut() else {
                    return Err(SyntaxError::ExtraClose { line });
                };
                opener.block = Some(children);
                opener.end_line = line;
            }
        }
        Ok(())
    }

    fn end_statement(&mut self) {
        if let Some(n) = self.current.take() {
            self.level().push(n);
            self.last_may_open = true;
        }
    }

    fn end_line(&mut self) {
        self.end_statement();
    }

    fn finish(mut self) -> Result<Vec<Node>, SyntaxError> {
        self.end_statement();
        if self.levels.len() > 1 {
            // The innermost unclosed block's opener is the last statement one level up.
            let depth = self.levels.len() - 2;
            let opener = self.levels[depth].last();
            return Err(SyntaxError::Unclosed {
                line: opener.map_or(0, |n| n.line),
                keyword: opener.map_or(String::new(), |n| n.words.join(" ")),
            });
        }
        Ok(self.levels.pop().unwrap_or_default())
    }
}
